"""HTTP and TCP checks and hooks sent from inside the workload's network namespace.

The deployer may have no route to a container's address (rootless Podman's slirp4netns or
pasta, Docker Desktop's VM, a remote engine): what a check or an HTTP hook sends goes to the
workload's own loopback, from a process that shares its network namespace, started through the
Engine API. That process is a stdlib-only Python program (:data:`PROBE`) run

- in a container of the workload that has ``python3`` (one of asyncdeploy's own images: the
  gate, or the demo's drain kit), with an exec; else
- in a short-lived helper container from the gate image (built from the installed package,
  ``asyncdeploy images build gate``) that joins the pause container's network namespace; it
  removes itself when the program ends (the engine's auto-remove), so a deployer killed during a
  check leaves nothing behind once the check's own timeout is past.

Each check is one such process; a drain's HTTP hook (the gate's drain call) is one started at
the drain's start, beside its claim (:class:`HookAhead`), so that it is sent the moment it is
asked for. Measured on this project's CI machine: a Podman exec or helper
run costs about 0.2 s, Docker's 0.1 s and 0.3 s; the checks' own timeouts are the plan's, the
engine's part of the call is bounded apart (:data:`ENGINE_BOUND`). Without either (no carrier,
and the engine lacks the gate image) the caller falls back to sending from here (``_netcheck``).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Literal, Self

import anyio

from asyncdeploy._errors import ENGINE_FAILURES, WorkloadNotFound
from asyncdeploy.builtin_images import GATE_IMAGE, built_in
from asyncdeploy.drivers.engine._session import EngineSession
from asyncdeploy.labels import LABEL_PROBE_OF, LABEL_ROLE, LABEL_WORKLOAD

__all__ = [
    "ENGINE_BOUND",
    "PROBE",
    "HookAhead",
    "Inside",
    "NotAhead",
    "ProbeAnswer",
    "Prober",
    "WaitProbes",
    "answer_of",
    "passes",
    "probe_argv",
]

ProbeAnswer = int | Literal["open"] | None
"""What the probe saw: an HTTP status, an open TCP port, or nothing."""

ENGINE_BOUND = 10.0  # the engine's own part of one check: an exec, or a helper's create and start

# Run as ``python3 -I -S -c PROBE KIND PORT TIMEOUT [PATH]``: one line out, ``status N``,
# ``open`` or ``none`` (no connection, or no HTTP answer, within TIMEOUT; ``inf``: none). As
# ``python3 -I -S -c PROBE serve``: the same for each ``KIND PORT TIMEOUT PATH`` line read on its
# input, until its end; ``once``: for the first such line only (none: nothing), then it ends.
PROBE = r"""
import socket, sys
def probe(kind, port, timeout, path="/"):
    port, timeout = int(port), None if timeout == "inf" else float(timeout)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout) as conn:
            if kind == "tcp":
                return "open"
            conn.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n"
                          % (path, port)).encode("latin-1"))
            head = b""
            while b"\r\n" not in head and len(head) < 16384:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                head += chunk
    except OSError:
        return "none"
    status = head.split(b"\r\n", 1)[0].split(b" ")
    if len(status) >= 2 and status[0].startswith(b"HTTP/") and status[1].isdigit():
        return "status %d" % int(status[1])
    return "none"
if sys.argv[1] == "serve":
    for line in sys.stdin:
        print(probe(*line.rstrip("\n").split(" ", 3)), flush=True)
elif sys.argv[1] == "once":
    line = sys.stdin.readline()
    if line:
        print(probe(*line.rstrip("\n").split(" ", 3)), flush=True)
else:
    print(probe(*sys.argv[1:5]), flush=True)
"""


def probe_argv(kind: str, port: int, timeout: float, path: str = "/") -> list[str]:
    """The command that runs :data:`PROBE` once (``kind``: ``http`` or ``tcp``)."""
    return ["python3", "-I", "-S", "-c", PROBE, *_request(kind, port, timeout, path)]


def _request(kind: str, port: int, timeout: float, path: str) -> list[str]:
    shown = "inf" if math.isinf(timeout) else f"{timeout:g}"
    return [kind, str(port), shown, path]


def answer_of(output: str) -> ProbeAnswer:
    """The probe's answer (its last answer line); None for none, or no answer line at all (a
    carrier whose exec failed, a helper that could not start)."""
    for line in reversed(output.splitlines()):
        word = line.strip()
        if word == "open":
            return "open"
        if word.startswith("status ") and word[7:].isdigit():
            return int(word[7:])
        if word == "none":
            return None
    return None


def passes(answer: ProbeAnswer, *, low: int = 200, high: int = 400) -> bool:
    """An open port, or an HTTP status in ``[low, high)`` (200-399: a check as the kubelet
    counts it; a hook passes on 2xx)."""
    return answer == "open" or (isinstance(answer, int) and low <= answer < high)


class Inside:
    """Runs the probe in a workload's network namespace, over one engine session."""

    def __init__(self, session: EngineSession, helper_image: str = GATE_IMAGE) -> None:
        self.session = session
        self.helper_image = helper_image
        self._helper_missing: bool | None = None  # looked up once per deployer

    async def available(self, members: Sequence[Mapping[str, Any]]) -> bool:
        """Whether a probe can run inside (a carrier, or the helper's image on the engine)."""
        return _carrier(members) is not None or await self._has_helper_image()

    async def members(self, workload: str) -> list[dict[str, Any]]:
        """The workload's containers, as the engine lists them."""
        return await self.session.containers({LABEL_WORKLOAD: workload})

    async def probe(
        self, members: Sequence[Mapping[str, Any]], argv: Sequence[str], what: str
    ) -> ProbeAnswer:
        """Run ``argv`` (:func:`probe_argv`) inside: its answer. An engine failure (the carrier
        or the pause container gone meanwhile) is no answer: the caller's next look says why."""
        carrier = _carrier(members)
        try:
            if carrier is not None:
                result = await self.session.exec(carrier, list(argv), what)
                return answer_of(result.output)
            joined = _joined(members)
            if joined is None:
                return None
            return answer_of(await self._helper(joined, argv, what))
        except (*ENGINE_FAILURES, TimeoutError):
            return None

    async def _has_helper_image(self) -> bool:
        if self._helper_missing is None:
            try:
                with self.session.errors(f"inspect image {self.helper_image}"):
                    await self.session.inspect_image(self.helper_image)
                self._helper_missing = False
            except WorkloadNotFound:
                self._helper_missing = True
            except ENGINE_FAILURES:
                return False  # not known now: looked up again next time
        return not self._helper_missing

    def _helper_config(
        self, joined: str, image: str, argv: Sequence[str], *, stdin: bool
    ) -> dict[str, Any]:
        """A helper container joined to ``joined``'s network namespace, removed as it ends;
        with ``stdin``: its input open until the one attached client closes it (or goes)."""
        return {
            "Image": image,
            "Entrypoint": list(argv[:1]),
            "Cmd": list(argv[1:]),
            "Labels": {LABEL_PROBE_OF: joined},
            "AttachStdin": stdin,
            "OpenStdin": stdin,
            "StdinOnce": stdin,
            "AttachStdout": True,
            "AttachStderr": True,
            "StopSignal": "SIGKILL",
            "StopTimeout": 0,
            "HostConfig": {"NetworkMode": f"container:{joined}", "AutoRemove": True},
        }

    @asynccontextmanager
    async def _helper_made(self, config: dict[str, Any], what: str) -> AsyncIterator[str]:
        """Create it; its id; removed by force (by name) if it is still there at the end. The
        create is shielded from cancellation (bounded): one cut off after the engine made the
        container would leave it behind, holding the workload's namespace (Podman then
        refuses to remove the pause container: "dependent containers")."""
        joined = config["Labels"][LABEL_PROBE_OF]
        name = f"asyncdeploy-probe-{joined[:12]}-{secrets.token_hex(4)}"
        try:
            shielded = anyio.CancelScope(shield=True)
            with shielded, anyio.fail_after(ENGINE_BOUND), self.session.errors(what):
                ident = await self.session.create(config, name)
            yield ident
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(ENGINE_BOUND):
                try:
                    with self.session.errors(f"remove {name}"):
                        await self.session.delete(name)
                except ENGINE_FAILURES:
                    pass  # removed itself already (auto-remove), the usual case
                await self._gone(name)

    async def _gone(self, name: str) -> None:
        """Until the engine no longer has the helper: its own removal (auto-remove) may still
        be under way when the delete above answers "removal in progress", and while it is,
        Podman refuses to remove the pause container it joined ("dependent containers"), so a
        failed create's roll-back or a drain right after a wait would leave the pause behind."""
        while True:
            try:
                with self.session.errors(f"look at {name}"):
                    await self.session.show(name)
            except WorkloadNotFound:
                return
            except ENGINE_FAILURES:
                pass  # asked again: the bound above ends it
            await anyio.sleep(0.05)

    async def _helper(self, joined: str, argv: Sequence[str], what: str) -> str:
        """Run ``argv`` once in a helper container joined to ``joined``'s network namespace;
        its output. Attached before it starts (it removes itself as it ends)."""
        config = self._helper_config(joined, self.helper_image, argv, stdin=False)
        async with self._helper_made(config, what) as ident:
            with self.session.errors(what):
                return await self._attached_run(ident)

    @asynccontextmanager
    async def prober(
        self, members: Sequence[Mapping[str, Any]], what: str
    ) -> AsyncIterator[Prober]:
        """A long-lived probe program (``PROBE serve``) in a helper container joined to the
        workload's namespace (from a carrier's image where there is one: it has ``python3``),
        asked a check a line over its attached input and output. Its input ends with this
        block, or with the connection when the deployer dies: it then ends and removes itself."""
        joined = _joined(members)
        if joined is None:
            raise WorkloadNotFound(
                f"{what}: no running container to join", engine=self.session.engine
            )
        image = _carrier_image(members) or self.helper_image
        argv = ["python3", "-I", "-S", "-c", PROBE, "serve"]
        config = self._helper_config(joined, image, argv, stdin=True)
        async with self._helper_made(config, what) as ident:
            handle = self.session.long_client.containers.container(ident)
            with self.session.errors(what):
                stream = handle.attach(stdin=True, stdout=True, stderr=True)
                await stream._init()  # the attach call itself, before the start
            try:
                with self.session.errors(what):
                    await self.session.start(ident)
                yield Prober(stream)
            finally:
                with anyio.CancelScope(shield=True):
                    await stream.close()

    async def _attached_run(self, ident: str) -> str:
        """Start a created container attached to its output (attached first: it may end and
        remove itself before anything could read it afterwards); its output to its end."""
        output = b""
        handle = self.session.long_client.containers.container(ident)
        async with handle.attach(stdout=True, stderr=True) as stream:
            await self.session.start(ident)
            while (message := await stream.read_out()) is not None:
                output += message.data
        return output.decode("utf-8", "replace")


class NotAhead(Exception):
    """The hook's probe started ahead could not take its request (no carrier, or its exec
    failed first): nothing was sent, the hook is to be sent the usual way."""


class HookAhead:
    """One HTTP hook's probe, started before the hook is asked for: ``PROBE once`` in an exec
    of the workload's carrier (the gate or kit container), its input kept open until the hook's
    one request has been answered (or until :meth:`abandon`); it ends after that answer. A drain starts it beside its claim, so the hook's
    request goes out the moment it is asked, not after an exec's start (a tenth to a fifth of
    a second measured here, between the drain's start and the engine's stop signal)."""

    def __init__(self, inside: Inside, workload: str, what: str) -> None:
        self.inside, self.workload, self.what = inside, workload, what
        self._requests, self._next = anyio.create_memory_object_stream[str](1)
        self._sent = False  # the request was handed to the exec's input: it may have gone
        self._heard = ""
        self._answer: ProbeAnswer = None
        self._answered = anyio.Event()
        self._finished = anyio.Event()  # answered, or abandoned: the input may end
        self._ended = anyio.Event()

    async def run(self) -> None:
        """The exec, to its end (after the request's answer, or once abandoned)."""
        try:
            carrier = _carrier(await self.inside.members(self.workload))
            if carrier is not None:
                argv = ["python3", "-I", "-S", "-c", PROBE, "once"]
                await self.inside.session.exec(
                    carrier, argv, self.what, self._hear, stdin=self._request()
                )
        except ENGINE_FAILURES:
            pass  # the hook is sent the usual way (ask says so), or nothing was asked
        finally:
            self._ended.set()

    async def ask(self, port: int, path: str) -> ProbeAnswer:
        """The hook's ``GET path`` on the workload's ``port``: its answer (None: none came).
        Raises :class:`NotAhead` when nothing was sent."""
        if self._ended.is_set():
            raise NotAhead(self.what)
        request = " ".join(_request("http", port, float("inf"), path)) + "\n"
        try:
            self._requests.send_nowait(request)
        except (anyio.WouldBlock, anyio.ClosedResourceError):
            raise NotAhead(self.what) from None  # asked once already, or abandoned
        async with anyio.create_task_group() as tg:

            async def until(event: anyio.Event) -> None:
                await event.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(until, self._answered)
            tg.start_soon(until, self._ended)
        if self._answered.is_set():
            return self._answer
        if not self._sent:
            raise NotAhead(self.what)
        return None  # sent, and the exec ended without an answer: the hook failed

    def abandon(self) -> None:
        """No request will come (or its answer is no longer awaited): the program reads the
        end of its input and ends."""
        self._requests.close()
        self._finished.set()

    async def _request(self) -> AsyncIterator[bytes]:
        """The exec's input: the request, then its end once the answer came (or none will).
        Not ended right after the request: a hop that does not carry a half-close (a TLS
        connection to a remote engine, a proxy) would close the exec before its answer."""
        async with self._next:
            async for line in self._next:
                self._sent = True
                yield line.encode()
                break
        await self._finished.wait()

    def _hear(self, text: str) -> None:
        self._heard += text
        if "\n" in self._heard and not self._answered.is_set():
            self._answer = answer_of(self._heard.partition("\n")[0])
            self._answered.set()
            self._finished.set()


class ProberLost(Exception):
    """The probe program's output ended (its container went)."""


class Prober:
    """The attached input and output of one ``PROBE serve``: a check a line each way."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._buffer = b""

    async def ask(self, kind: str, port: int, timeout: float, path: str = "/") -> ProbeAnswer:
        """One check, answered within ``timeout`` by the program (the caller bounds the rest)."""
        await self._stream.write_in((" ".join(_request(kind, port, timeout, path)) + "\n").encode())
        while b"\n" not in self._buffer:
            message = await self._stream.read_out()
            if message is None:
                raise ProberLost("the probe's output ended")
            if message.stream == 1:  # its standard output; nothing else is an answer
                self._buffer += message.data
        line, _, self._buffer = self._buffer.partition(b"\n")
        return answer_of(line.decode("utf-8", "replace"))


class WaitProbes:
    """The checks of one wait: a :meth:`Inside.prober` opened at the first check and kept until
    the wait ends; one lost or cut off (past a check's bound its answers would no longer match
    its questions) is closed, and the next check opens another."""

    def __init__(self, inside: Inside, what: str) -> None:
        self.inside = inside
        self.what = what
        self._stack = AsyncExitStack()
        self._prober: Prober | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._close()

    async def ask(
        self, members: Sequence[Mapping[str, Any]], kind: str, port: int, timeout: float, path: str
    ) -> ProbeAnswer:
        """One check inside; None when it could not be made (the next look says why)."""
        with anyio.move_on_after(timeout + ENGINE_BOUND):
            try:
                if self._prober is None:
                    opened = self.inside.prober(members, self.what)
                    self._prober = await self._stack.enter_async_context(opened)
                return await self._prober.ask(kind, port, timeout, path)
            except (*ENGINE_FAILURES, ProberLost, OSError, TimeoutError):
                pass  # the workload's container went, the engine dropped the attach, or hung
        await self._close()
        return None

    async def _close(self) -> None:
        with anyio.CancelScope(shield=True):
            self._prober = None
            stack, self._stack = self._stack, AsyncExitStack()
            try:
                await stack.aclose()
            except (*ENGINE_FAILURES, OSError):
                pass  # its container removes itself as its input ends


def _carrier_image(members: Sequence[Mapping[str, Any]]) -> str | None:
    carrier = _carrier(members)
    image = next((m.get("Image") for m in members if str(m.get("Id")) == carrier), None)
    return None if image is None else str(image)


def _joined(members: Sequence[Mapping[str, Any]]) -> str | None:
    """The container whose network namespace a helper joins: the pause container, else (Podman
    pauses it to claim a drain, and refuses to start a container joined to a paused one) a
    running container of the workload, which shares the pause container's namespace."""

    def role(member: Mapping[str, Any]) -> str:
        return str((member.get("Labels") or {}).get(LABEL_ROLE))

    running = [m for m in members if m.get("State") == "running" and role(m) != "autoheal"]
    running.sort(key=lambda m: role(m) != "pause")
    return str(running[0]["Id"]) if running else None


def _carrier(members: Sequence[Mapping[str, Any]]) -> str | None:
    """A running container of the workload known to have ``python3``: the gate first, then a
    drain-kit (demo) server."""
    running = [m for m in members if m.get("State") == "running"]
    for kind in ("gate", "demo"):
        for member in running:
            if built_in(str(member.get("Image") or "")) == kind:
                return str(member["Id"])
    return None
