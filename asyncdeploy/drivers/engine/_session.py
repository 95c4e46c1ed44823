"""One open engine: the aiodocker client, its address and API version, the error mapping, and
the raw calls every other part of the engine wing makes through it.

This is the one module that touches aiodocker's private members (``_query``, ``_query_json``,
a listed container's ``_container``). The parts are handed a session, never the driver: the
create attempt (:mod:`._create`), the puller (:mod:`._pull`), the ready wait (:mod:`._ready`),
the container operations (:mod:`._container_ops`) and the markers (:mod:`._markers`).

Raw calls pass the engine's errors through; the caller wraps them in :meth:`EngineSession.errors`
naming what it did. The calls that name themselves (``containers``, ``exec``) translate inside.
Podman's variant (its status codes and its libpod endpoints) is :class:`PodmanSession`.
"""

from __future__ import annotations

import builtins
import codecs
import json
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any, ClassVar

import aiodocker
import aiodocker.stream
import aiohttp
import anyio
import attrs

from asyncdeploy._errors import (
    CreateError,
    EngineAPIError,
    EngineTimeout,
    EngineUnavailable,
    WorkloadConflict,
    WorkloadNotFound,
)
from asyncdeploy._groups import lone_error
from asyncdeploy._results import ExecResult
from asyncdeploy.drivers.engine import _spec as spec
from asyncdeploy.drivers.engine._address import EngineAddress
from asyncdeploy.drivers.engine._answer import answer_bound
from asyncdeploy.drivers.engine._libpod import libpod_spec
from asyncdeploy.labels import LABEL_WORKLOAD

__all__ = ["EngineSession", "NoAnswer", "PodmanSession"]

# A connection cut while a response streams in is a lost connection, like a refused one.
_CONNECTION_LOST = (
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    ConnectionError,
    FileNotFoundError,
)
LIBPOD_API = "v4.0.0/libpod"  # the libpod API on the same socket; any v4 prefix is served
# The connections of one deployer's short calls (list, inspect, signal, pause, remove ...): a
# burst of drains queues on this side, not as unbounded work on the engine. 40 drains' calls
# take the same engine CPU at 16, 32 and 100 connections, and 10 % more wall time at 32 than
# at 100 (Docker; benchmarks/pool.py). The long waits have their own connections
# (``long_client``), so that forty hooks running cannot hold back one signal.
POOL_SIZE = 32
_ENDLESS = aiohttp.ClientTimeout(total=None, sock_read=None)
EXEC_POLL_SECONDS = 0.25  # how often an interactive exec looks whether its command has ended
_PODMAN_MISSING = ("no such container", "container not known")
#: How many times a list of containers is asked when the engine says one went missing meanwhile.
_LIST_TRIES = 3
# "dependency exists": Podman 4.3's words for a pause container others still share
_PODMAN_CONFLICTS = (
    "state improper",
    "already in use",
    "dependent containers",
    "dependency exists",
)


class NoAnswer(EngineUnavailable):
    """The engine took the call and gave no answer within the bound (a deadlocked daemon):
    asking again would only wait as long again."""


@attrs.define(kw_only=True)
class EngineSession:
    """The Docker rules: 409 is a conflict, 404 is missing; ``engine`` names it in errors."""

    client: aiodocker.Docker
    address: EngineAddress  # its URL and TLS context (the waits' client is made from it too)
    engine: str
    api_version: str = ""  # what the engine said it speaks (devices depend on it)
    _long: list[aiodocker.Docker] = attrs.field(factory=list)  # the waits' own client, shared

    kill_triggers_restart: ClassVar[bool] = False  # Docker: a kill is a stop for restart policies
    polls_killed: ClassVar[bool] = False  # Docker's wait returns as a killed container dies
    claims_in_volumes: ClassVar[bool] = True  # a drain's claim record: a volume (see _claim)
    labelled_events: ClassVar[bool] = True  # its event stream takes a label filter

    @classmethod
    def open(
        cls, address: EngineAddress | str, *, engine: str, client_api_version: str = "auto"
    ) -> EngineSession:
        """A client of its own for ``address`` (a URL: as given, without TLS; ``ValueError``
        when aiodocker refuses it); ``client_api_version``: the version it asks for (``auto``:
        what the engine says)."""
        if isinstance(address, str):
            address = EngineAddress(address)
        client = _client(address, client_api_version, limit=POOL_SIZE)
        return cls(client=client, address=address, engine=engine)

    @property
    def url(self) -> str:
        return self.address.url

    def variant(self, engine: str, api_version: str) -> EngineSession:
        """The same client, under the rules of the engine that answered."""
        kind = PodmanSession if engine == "podman" else EngineSession
        return kind(
            client=self.client,
            address=self.address,
            engine=engine,
            api_version=api_version,
            long=self._long,
        )

    @property
    def long_client(self) -> aiodocker.Docker:
        """The client of the calls that wait by design (made on first use, with the API
        version the main client learnt)."""
        if not self._long:
            self._long.append(_client(self.address, self.client.api_version, limit=0))
        return self._long[0]

    async def aclose(self) -> None:
        await self.client.close()
        for client in self._long:
            await client.close()
        self._long.clear()

    # --- the one translation of engine errors ------------------------------------------------

    def conflict(self, exc: aiodocker.DockerError) -> bool:
        """Whether an error means "wrong state / name taken" (Docker answers 409)."""
        return bool(exc.status == 409)

    def missing(self, exc: aiodocker.DockerError) -> bool:
        """Whether an error means "no such object" (Docker answers 404)."""
        return bool(exc.status == 404)

    @contextmanager
    def errors(self, what: str) -> Iterator[None]:
        """Translate aiodocker and transport errors into asyncdeploy's, naming the call."""
        try:
            yield
        except aiodocker.DockerError as exc:
            message = f"{what}: {exc.message}"
            if exc.status == 900:
                raise EngineUnavailable(message, engine=self.engine) from exc
            if self.missing(exc):
                raise WorkloadNotFound(message, engine=self.engine, status=404) from exc
            if self.conflict(exc):
                raise WorkloadConflict(message, engine=self.engine, status=exc.status) from exc
            raise EngineAPIError(message, engine=self.engine, status=exc.status) from exc
        except aiohttp.ServerTimeoutError as exc:  # a deadlocked daemon: no answer, no error
            raise NoAnswer(
                f"{what}: the engine took the call and gave no answer within "
                f"{answer_bound():g} s ({self.address}; ASYNCDEPLOY_ENGINE_TIMEOUT sets how long)",
                engine=self.engine,
            ) from exc
        except _CONNECTION_LOST as exc:
            raise EngineUnavailable(f"{what}: {exc} at {self.address}", engine=self.engine) from exc
        except aiohttp.ClientError as exc:
            raise EngineAPIError(f"{what}: {exc}", engine=self.engine, status=0) from exc
        except TimeoutError as exc:
            raise EngineTimeout(f"{what}: no answer in time", engine=self.engine) from exc

    # --- raw requests (the caller finalises a streamed response) -----------------------------

    def query(
        self, path: str, method: str = "GET", **options: Any
    ) -> AbstractAsyncContextManager[aiohttp.ClientResponse]:
        """One request (``params``, ``headers``, ``timeout``, ``versioned_api`` as aiodocker
        takes them); the caller finalises the response."""
        return self.client._query(path, method, **options)

    async def query_json(self, path: str, method: str = "GET", **options: Any) -> Any:
        return await self.client._query_json(path, method, **options)

    # --- containers ----------------------------------------------------------------------------

    async def ping(self) -> dict[str, str]:
        """The headers of ``/_ping`` (fast on both engines: Podman's ``/version`` is slow); a
        client on ``auto`` takes its API version from them."""
        async with self.query("_ping", versioned_api=False) as response:
            await response.read()
            headers = dict(response.headers)
        api = next((v for k, v in headers.items() if k.lower() == "api-version"), "")
        if self.client.api_version == "auto" and api:
            self.client.api_version = f"v{api}"
        return headers

    async def version(self) -> dict[str, Any]:
        """The engine's ``/version``, asked once: a client on ``auto`` learns its API version
        from it (aiodocker would ask ``/version`` for that first, then again for the answer:
        on Podman, whose ``/version`` takes 0.3 s idle and seconds when loaded, every CLI
        command paid it twice before its first call)."""
        answer = dict(await self.query_json("version", versioned_api=False))
        if self.client.api_version == "auto" and answer.get("ApiVersion"):
            self.client.api_version = f"v{answer['ApiVersion']}"
        return answer

    async def containers(self, labels: Mapping[str, str]) -> builtins.list[dict[str, Any]]:
        """asyncdeploy's containers carrying exactly these (non-empty) label values.

        A list has nothing to miss: an answer that a container is missing means one was
        removed while the engine listed (Podman answers 500 "container not known" when another
        client's delete takes one away mid-list), and the list is asked again."""
        wanted = [LABEL_WORKLOAD] + [f"{k}={v}" for k, v in labels.items()]
        tries = 1
        while True:
            try:
                with self.errors("list containers"):
                    found = await self.client.containers.list(all=True, filters={"label": wanted})
                return [c._container for c in found]
            except WorkloadNotFound as exc:
                if tries == _LIST_TRIES:
                    raise EngineAPIError(str(exc), engine=self.engine, status=500) from exc
                tries += 1

    def _handle(self, ident: str) -> aiodocker.containers.DockerContainer:
        return self.client.containers.container(ident)

    def _waiting(self, ident: str) -> aiodocker.containers.DockerContainer:
        """A handle for a call that waits by design, on its own connections."""
        return self.long_client.containers.container(ident)

    async def show(self, ident: str) -> dict[str, Any]:
        return dict(await self._handle(ident).show())

    async def logs(self, ident: str, **params: Any) -> builtins.list[str]:
        return list(await self._waiting(ident).log(**params))

    def follow_logs(self, ident: str, **params: Any) -> AsyncIterator[str]:
        return self._waiting(ident).log(follow=True, **params)

    async def create(self, config: dict[str, Any], name: str) -> str:
        """Create one container; its id."""
        return str((await self.client.containers.create(config, name=name)).id)

    async def start(self, ident: str) -> None:
        await self._handle(ident).start()

    async def kill(self, ident: str, signal: str) -> None:
        # aiodocker lets a kill wait for ever; a signal is answered at once, or not at all
        await self._handle(ident).kill(signal=signal, timeout=_bounded())

    async def wait(self, ident: str) -> int | None:
        code = (await self._waiting(ident).wait()).get("StatusCode")
        return None if code is None else int(code)

    async def stop(self, ident: str, t: int) -> None:
        await self._waiting(ident).stop(t=t, timeout=_bounded(t))

    async def delete(self, ident: str) -> None:
        await self._handle(ident).delete(force=True, v=True)

    async def pause(self, ident: str) -> None:
        await self._handle(ident).pause()

    async def put_archive(self, ident: str, path: str, data: bytes) -> None:
        await self._handle(ident).put_archive(path, data)  # type: ignore[no-untyped-call]

    async def get_archive(self, ident: str, path: str) -> Any:
        return await self._handle(ident).get_archive(path)

    async def exec(
        self,
        ident: str,
        command: Sequence[str],
        what: str,
        on_output: Callable[[str], None] | None = None,
        *,
        stdin: AsyncIterable[bytes] | None = None,
        tty: bool = False,
        size: tuple[int, int] | None = None,
    ) -> ExecResult:
        """Run ``command`` attached, its output to ``on_output`` as it comes; translated.
        ``stdin`` is written to the command's input as it comes, its end half-closes it (the
        command sees end of file); ``tty``: in a terminal of ``size`` (columns, lines)."""
        output: builtins.list[str] = []
        decoder = codecs.getincrementaldecoder("utf-8")(
            errors="replace"
        )  # a chunk may cut a character
        with self.errors(what):
            execution = await self._waiting(ident).exec(
                list(command), stdin=stdin is not None, tty=tty
            )
            try:
                async with (
                    execution.start(detach=False) as stream,
                    anyio.create_task_group() as tg,
                ):
                    if size is not None:
                        await execution.resize(w=size[0], h=size[1])
                    if stdin is not None:
                        tg.start_soon(self._feed, stream, stdin)
                    if stdin is not None or tty:  # the engine may keep it open past the end
                        tg.start_soon(self._until_ended, execution, tg.cancel_scope)
                    while (message := await stream.read_out()) is not None:
                        text = decoder.decode(message.data)
                        output.append(text)
                        if on_output is not None and text:
                            on_output(text)
                    tg.cancel_scope.cancel()  # the command ended: its input is no longer read
            except BaseExceptionGroup as group:
                raise lone_error(group) from None  # translated above, as the call's own
            exit_code = (await execution.inspect())["ExitCode"]
        return ExecResult(
            exit_code=int(exit_code if exit_code is not None else -1), output="".join(output)
        )

    @staticmethod
    async def _until_ended(execution: Any, scope: anyio.CancelScope) -> None:
        """Stop reading once the command has ended: with stdin attached (or a terminal) Docker
        keeps the connection open after the command's exit until the client closes it."""
        while True:
            await anyio.sleep(EXEC_POLL_SECONDS)
            try:
                running = (await execution.inspect()).get("Running", True)
            except aiodocker.DockerError as exc:
                if exc.status != 404:
                    raise
                running = False  # its container ended, and the engine dropped the exec with it
            if not running:
                await anyio.sleep(EXEC_POLL_SECONDS)  # its last output, still on its way
                scope.cancel()
                return

    @staticmethod
    async def _feed(stream: aiodocker.stream.Stream, data: AsyncIterable[bytes]) -> None:
        """Write ``data`` to an exec's input, then half-close the connection: the command reads
        end of file while its output still comes back."""
        async for chunk in data:
            await stream.write_in(chunk)
        connection = stream._resp.connection if stream._resp is not None else None
        transport = connection.transport if connection is not None else None
        if transport is not None and transport.can_write_eof():
            transport.write_eof()

    async def restarts(self, idents: Sequence[str]) -> dict[str, int]:
        """Each container's ``RestartCount`` (the list call does not carry it), inspected
        concurrently; a container removed meanwhile is left out."""
        counts: dict[str, int] = {}

        async def one(ident: str) -> None:
            try:
                with self.errors(f"inspect {ident[:12]}"):
                    data = await self.show(ident)
            except WorkloadNotFound:
                return
            counts[ident] = int(data.get("RestartCount") or 0)

        async with anyio.create_task_group() as tg:
            for ident in idents:
                tg.start_soon(one, ident)
        return counts

    # --- images and volumes ------------------------------------------------------------------

    async def inspect_image(self, image: str) -> dict[str, Any]:
        return dict(await self.client.images.inspect(image))

    async def show_volume(self, name: str) -> dict[str, Any]:
        volume = aiodocker.volumes.DockerVolume(self.client, spec.path_segment(name))  # type: ignore[no-untyped-call]
        return dict(await volume.show())  # type: ignore[no-untyped-call]

    async def create_volume(self, name: str, labels: Mapping[str, str]) -> None:
        await self.client.volumes.create({"Name": name, "Labels": dict(labels)})  # type: ignore[no-untyped-call]

    async def remove_volume(self, name: str) -> None:
        volume = aiodocker.volumes.DockerVolume(self.client, spec.path_segment(name))  # type: ignore[no-untyped-call]
        await volume.delete()  # type: ignore[no-untyped-call]

    async def volumes(self, label: str) -> builtins.list[dict[str, Any]]:
        """The volumes carrying ``label`` (``key=value``)."""
        listed = await self.client.volumes.list(filters={"label": [label]})  # type: ignore[no-untyped-call]
        return list(listed.get("Volumes") or [])


class PodmanSession(EngineSession):
    """Podman's rules (the quirks are listed in :mod:`._podman`): its 500s that mean a conflict
    or a missing container, the libpod kill and wait, and the libpod create for CDI devices."""

    kill_triggers_restart: ClassVar[bool] = True  # only a stop call keeps the policy from acting
    polls_killed: ClassVar[bool] = True  # every wait blocks on a cut-off hook's exec session
    claims_in_volumes: ClassVar[bool] = False  # concurrent volume creates stall its database
    labelled_events: ClassVar[bool] = False  # 4.3's compatible stream: nothing under a label filter

    def missing(self, exc: aiodocker.DockerError) -> bool:
        """A container removed while the call ran: 500 "no such container" (another delete),
        or "container not known" (a list that met one being removed)."""
        message = str(exc.message).lower()
        return exc.status == 404 or (
            exc.status == 500 and any(m in message for m in _PODMAN_MISSING)
        )

    def conflict(self, exc: aiodocker.DockerError) -> bool:
        if exc.status == 409:
            return True
        message = str(exc.message).lower()
        return exc.status == 500 and any(m in message for m in _PODMAN_CONFLICTS)

    async def create(self, config: dict[str, Any], name: str) -> str:
        if not (config.get("HostConfig") or {}).get("Devices"):
            return await super().create(config, name)
        try:
            body = libpod_spec(config, name)
        except ValueError as exc:
            raise CreateError(f"cannot create {name} with CDI devices on Podman: {exc}") from None
        answer = await self.query_json(
            f"{LIBPOD_API}/containers/create",
            "POST",
            data=json.dumps(body),
            versioned_api=False,
        )
        return str(answer["Id"])

    async def kill(self, ident: str, signal: str) -> None:
        """Through the libpod endpoint: the compatible one waits, after a SIGKILL, for the
        container's exec sessions to be cleaned up (20 s when a pre_stop hook was cut off)."""
        path = f"{LIBPOD_API}/containers/{ident}/kill"
        async with self.query(
            path, "POST", params={"signal": signal}, versioned_api=False
        ) as response:
            response.release()  # aiodocker's ``_query`` leaves that to its caller

    async def wait(self, ident: str) -> int | None:
        """Through the libpod endpoint, polling every 10 ms: the compatible wait returns only
        after Podman's per-container cleanup (about 0.2 s later for one container)."""
        path = f"{LIBPOD_API}/containers/{ident}/wait"
        params = {"condition": "stopped", "interval": "10ms"}
        code = await self.long_client._query_json(
            path, "POST", params=params, versioned_api=False, timeout=_ENDLESS
        )
        return None if code is None else int(code)


def _bounded(more: float = 0) -> aiohttp.ClientTimeout:
    """The answer bound (or the longer one of ``answer_within``; plus ``more`` seconds the
    call may wait by design), to the answer's headers and between its reads."""
    bound = answer_bound()
    return aiohttp.ClientTimeout(sock_connect=bound, sock_read=bound + more)


class _Client(aiodocker.Docker):
    """aiodocker's client, its calls bounded by :func:`_bounded` as it stands when each call is
    made (aiodocker reads ``_timeout`` per request, for every call not given its own)."""

    @property
    def _timeout(self) -> aiohttp.ClientTimeout:
        return _bounded()

    @_timeout.setter
    def _timeout(self, _: object) -> None:
        pass  # aiodocker's own default, set as it starts: the property stands instead


def _client(address: EngineAddress, api_version: str, *, limit: int) -> aiodocker.Docker:
    """An aiodocker client whose short calls are bounded by :func:`_bounded` and whose
    connections are at most ``limit`` (0: no limit); aiodocker's refusals are ``ValueError``."""
    try:
        client = _Client(url=address.url, ssl_context=address.tls, api_version=api_version)
    except aiodocker.DockerError as exc:  # its SSH transport refusing an address
        raise ValueError(exc.message) from None
    # aiodocker builds the connector from the address; its pool size is set before any call
    client.connector._limit = limit
    return client
