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
processes): ``exit_seconds``. Pure data and functions: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from asyncdeploy.durations import parse_duration

__all__ = ["ENGINE_PRESETS", "EnginePreset", "find_preset", "flag_seconds"]


def flag_seconds(command: Sequence[str], name: str) -> float | None:
    """The value of ``--name V`` or ``--name=V`` in a command, in seconds (bare numbers too)."""
    for i, word in enumerate(command):
        if word == name and i + 1 < len(command):
            return parse_duration(command[i + 1])
        if word.startswith(f"{name}="):
            return parse_duration(word.partition("=")[2])
    return None


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
    ),
    EnginePreset(
        name="SGLang",
        images=("lmsysorg/sglang", "sglang"),
        commands=("sglang.launch_server", "sglang"),
        sigterm_drain=_never,
        exit_seconds=10.0,
        flag="",
    ),
    EnginePreset(
        name="TGI",
        images=("text-generation-inference",),
        commands=("text-generation-launcher",),
        sigterm_drain=_unbounded,
        exit_seconds=10.0,
        flag="",
    ),
    EnginePreset(
        name="Triton",
        images=("tritonserver",),
        commands=("tritonserver",),
        sigterm_drain=_triton,
        exit_seconds=5.0,
        flag="--exit-timeout-secs",
    ),
    EnginePreset(
        name="llama.cpp server",
        images=("llama.cpp", "llama-cpp", "llama-server"),
        commands=("llama-server",),
        sigterm_drain=_never,
        exit_seconds=3.0,
        flag="",
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
