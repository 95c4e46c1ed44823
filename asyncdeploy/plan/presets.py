"""What the common inference servers do when they get their stop signal, for ``lint``.

A preset is recognised by the image's repository or by the command line. What each does on
SIGTERM (as published; check your version's release notes):

=============  ===========================================================================
vLLM           ``--shutdown-timeout N`` (default 0): 0 aborts in-flight requests at once;
               N > 0 stops taking new ones and waits for in-flight up to N s
SGLang         exits without waiting for in-flight requests
TGI            the launcher stops taking requests and waits for in-flight ones, unbounded
               (bounded only by the grace period), then stops its shards
Triton         stops taking requests and waits for in-flight ones up to
               ``--exit-timeout-secs`` (default 30)
llama.cpp      ``llama-server`` exits without waiting for in-flight requests
=============  ===========================================================================

Each also needs some seconds of its own after that (freeing device memory, stopping worker
processes): ``exit_seconds``.

Where each listens (behind a gate its own port must be on the workload's loopback, or a client
that finds it goes around the gate's drain):

=============  ===========================================================================
vLLM           ``--host``; unset: every interface
SGLang         ``--host``; default 127.0.0.1
TGI            ``--hostname`` (or the ``HOSTNAME`` variable, which container runtimes set to
               the container's name); default 0.0.0.0
Triton         ``--http-address``; default 0.0.0.0 (gRPC and metrics have flags of their own)
llama.cpp      ``--host`` (or ``LLAMA_ARG_HOST``); the published images set 0.0.0.0
=============  ===========================================================================

Pure data and functions: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import attrs

from asyncdeploy.durations import parse_duration

__all__ = [
    "ENGINE_PRESETS",
    "EnginePreset",
    "find_preset",
    "flag_seconds",
    "flag_value",
    "is_loopback",
]


def flag_value(command: Sequence[str], name: str) -> str | None:
    """The value of ``--name V`` or ``--name=V`` in a command (the last one given)."""
    value = None
    for i, word in enumerate(command):
        if word == name and i + 1 < len(command):
            value = command[i + 1]
        elif word.startswith(f"{name}="):
            value = word.partition("=")[2]
    return value


def flag_seconds(command: Sequence[str], name: str) -> float | None:
    """The value of ``--name V`` or ``--name=V`` in a command, in seconds (bare numbers too)."""
    value = flag_value(command, name)
    return None if value is None else parse_duration(value)


def is_loopback(address: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: reached from inside the network namespace only."""
    return address in ("localhost", "::1", "[::1]") or address.startswith("127.")


def _vllm(argv: Sequence[str]) -> float | None:
    timeout = flag_seconds(argv, "--shutdown-timeout")
    return timeout if timeout else None  # 0 (the default): aborts at once


def _never(argv: Sequence[str]) -> float | None:
    return None


def _unbounded(argv: Sequence[str]) -> float | None:
    return float("inf")


def _triton(argv: Sequence[str]) -> float | None:
    timeout = flag_seconds(argv, "--exit-timeout-secs")
    return 30.0 if timeout is None else (timeout or None)


@attrs.frozen(kw_only=True)
class EnginePreset:
    name: str
    images: tuple[str, ...]  # fragments of an image's repository
    commands: tuple[str, ...]  # words of a command line that name the server
    #: Seconds it waits for in-flight requests after SIGTERM (None: it does not; inf: unbounded).
    sigterm_drain: Callable[[Sequence[str]], float | None]
    exit_seconds: float  # its own shutdown after the drain
    flag: str  # what the user changes to make it drain on SIGTERM, or "" if nothing
    listen_flag: str  # the flag naming the address its HTTP server listens on
    listen_env: str = ""  # a variable it reads for that address when the flag is not given
    listen_default: str  # the address with neither, as its published image runs it

    def listen_address(self, argv: Sequence[str], env: Mapping[str, str]) -> tuple[str, str]:
        """Where its HTTP server listens, and what says so."""
        value = flag_value(argv, self.listen_flag)
        if value is not None:
            return value, self.listen_flag
        if self.listen_env and self.listen_env in env:
            return env[self.listen_env], self.listen_env
        return self.listen_default, f"{self.name}'s default without {self.listen_flag}"

    def describe_drain(self, argv: Sequence[str]) -> str:
        seconds = self.sigterm_drain(argv)
        if seconds is None:
            return "aborts in-flight requests on SIGTERM"
        if seconds == float("inf"):
            return "waits for in-flight requests on SIGTERM, with no bound of its own"
        return f"waits up to {seconds:g} s for in-flight requests on SIGTERM"


ENGINE_PRESETS: tuple[EnginePreset, ...] = (
    EnginePreset(
        name="vLLM",
        images=("vllm/vllm-openai", "vllm-openai", "/vllm:", "vllm/vllm"),
        commands=("vllm", "vllm.entrypoints.openai.api_server"),
        sigterm_drain=_vllm,
        exit_seconds=10.0,
        flag="--shutdown-timeout",
        listen_flag="--host",
        listen_default="0.0.0.0",
    ),
    EnginePreset(
        name="SGLang",
        images=("lmsysorg/sglang", "sglang"),
        commands=("sglang.launch_server", "sglang"),
        sigterm_drain=_never,
        exit_seconds=10.0,
        flag="",
        listen_flag="--host",
        listen_default="127.0.0.1",
    ),
    EnginePreset(
        name="TGI",
        images=("text-generation-inference",),
        commands=("text-generation-launcher",),
        sigterm_drain=_unbounded,
        exit_seconds=10.0,
        flag="",
        listen_flag="--hostname",
        listen_env="HOSTNAME",
        listen_default="0.0.0.0",
    ),
    EnginePreset(
        name="Triton",
        images=("tritonserver",),
        commands=("tritonserver",),
        sigterm_drain=_triton,
        exit_seconds=5.0,
        flag="--exit-timeout-secs",
        listen_flag="--http-address",
        listen_default="0.0.0.0",
    ),
    EnginePreset(
        name="llama.cpp server",
        images=("llama.cpp", "llama-cpp", "llama-server"),
        commands=("llama-server",),
        sigterm_drain=_never,
        exit_seconds=3.0,
        flag="",
        listen_flag="--host",
        listen_env="LLAMA_ARG_HOST",
        listen_default="0.0.0.0",
    ),
)


def find_preset(image: str, argv: Sequence[str]) -> EnginePreset | None:
    """The preset for a container's image (its repository, not its tag) or command line."""
    repository = image.lower().rsplit("@", 1)[0]
    for preset in ENGINE_PRESETS:
        if any(fragment in repository for fragment in preset.images):
            return preset
    words = {word.rsplit("/", 1)[-1] for word in argv[:4]}
    for preset in ENGINE_PRESETS:
        if words & set(preset.commands):
            return preset
    return None
