"""The Pod calls the driver makes, on kubernetes-asyncio, as plain JSON in and out.

Every call goes through kubernetes-asyncio's generated ``CoreV1Api`` with
``_preload_content=False`` and parses the JSON itself, because the generated models get real
answers wrong: a collection delete answers a ``PodList`` that the client squeezes into a
``V1Status`` (dropping the items), and a watch ``BOOKMARK`` carries ``containers: null``, which
``V1PodSpec`` refuses. Statuses and transport errors are mapped here (:mod:`._errors`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Literal, cast

import aiohttp
from kubernetes_asyncio.client import ApiClient, CoreV1Api, DiscoveryV1Api, VersionApi
from kubernetes_asyncio.stream import WsApiClient

from asyncdeploy.drivers.kubernetes._errors import ENGINE, map_errors, status_error
from asyncdeploy.errors import EngineAPIError, EngineUnavailable

__all__ = ["JSONLines", "PodAPI", "Resource", "TextLines"]

STDOUT, STDERR, ERROR = 1, 2, 3  # exec channels (v4.channel.k8s.io)
Resource = Literal["pods", "events", "services", "endpointslices"]
_LISTS: dict[str, Callable[[ApiClient], Callable[..., Awaitable[object]]]] = {
    "pods": lambda client: CoreV1Api(client).list_namespaced_pod,
    "events": lambda client: CoreV1Api(client).list_namespaced_event,  # the kubelet's records
    "services": lambda client: CoreV1Api(client).list_namespaced_service,
    "endpointslices": lambda client: DiscoveryV1Api(client).list_namespaced_endpoint_slice,
}


class TextLines:
    """The lines of a streamed answer (logs), transport errors mapped; ends with the stream."""

    def __init__(self, response: aiohttp.ClientResponse, what: str) -> None:
        self._response = response
        self._what = what

    def __aiter__(self) -> TextLines:
        return self

    async def _line(self) -> bytes:
        try:
            with map_errors(self._what):
                line = await self._response.content.readline()
        except ValueError as exc:  # a line longer than the read buffer: the stream is unusable
            raise EngineUnavailable(f"{self._what}: {exc}", engine=ENGINE) from exc
        if not line:
            raise StopAsyncIteration
        return line

    async def __anext__(self) -> str:
        return (await self._line()).decode(errors="replace")


class JSONLines(TextLines):
    """A watch: one JSON object per line (``{"type": ..., "object": ...}``)."""

    def __aiter__(self) -> JSONLines:
        return self

    async def __anext__(self) -> dict[str, Any]:  # type: ignore[override]
        while True:
            line = (await self._line()).strip()
            if line:
                try:
                    event: dict[str, Any] = json.loads(line)
                except ValueError as exc:
                    raise EngineUnavailable(
                        f"{self._what}: a line that is not JSON: {line[:80]!r}", engine=ENGINE
                    ) from exc
                return event


class PodAPI:
    """Pods in one cluster, through one ``ApiClient`` (never the global default client)."""

    def __init__(self, client: ApiClient, *, request_timeout: float = 30.0) -> None:
        self.client = client
        self.request_timeout = request_timeout
        self._core = CoreV1Api(client)
        self._ws: WsApiClient | None = None  # for exec, made on first use (a second session)

    async def aclose(self) -> None:
        try:
            if self._ws is not None:
                await self._ws.close()
        finally:
            await self.client.close()

    # --- plumbing ------------------------------------------------------------------------

    async def _open(self, request: Awaitable[object], what: str) -> aiohttp.ClientResponse:
        """Send ``request``; return the open response, or raise the mapped error."""
        with map_errors(what):
            response = cast(aiohttp.ClientResponse, await request)
            if response.status >= 400:
                async with response:
                    body = await response.read()
                raise status_error(
                    response.status,
                    body,
                    what,
                    retry_after_header=response.headers.get("Retry-After"),
                )
        return response

    async def _json(self, request: Awaitable[object], what: str) -> dict[str, Any]:
        response = await self._open(request, what)
        with map_errors(what):
            async with response:
                body = await response.read()
        try:
            data: dict[str, Any] = json.loads(body)
        except ValueError as exc:
            raise EngineAPIError(
                f"{what}: the answer is not JSON: {body[:80]!r}",
                engine=ENGINE,
                status=response.status,
            ) from exc
        return data

    def _timeout(self) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=self.request_timeout)

    # --- calls ---------------------------------------------------------------------------

    async def version(self) -> dict[str, Any]:
        """``GET /version``."""
        call = VersionApi(self.client).get_code(
            _preload_content=False, _request_timeout=self._timeout()
        )
        return await self._json(call, "GET /version")

    async def read(self, namespace: str, name: str) -> dict[str, Any]:
        """``GET /api/v1/namespaces/{namespace}/pods/{name}``."""
        call = self._core.read_namespaced_pod(
            name, namespace, _preload_content=False, _request_timeout=self._timeout()
        )
        return await self._json(call, f"get pod {namespace}/{name}")

    async def list_pods(
        self,
        namespace: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource: Resource = "pods",
    ) -> dict[str, Any]:
        """``GET /api/v1/namespaces/{namespace}/pods`` (or ``events``): a list with its
        resourceVersion."""
        call = _LISTS[resource](self.client)(
            namespace,
            **_selectors(label_selector, field_selector),
            _preload_content=False,
            _request_timeout=self._timeout(),
        )
        return await self._json(call, f"list {resource} in {namespace}")

    async def list_pods_everywhere(self, *, label_selector: str) -> dict[str, Any]:
        """``GET /api/v1/pods?labelSelector=...``: the Pods of every namespace (``-A``); its
        resourceVersion is the cluster's, so a watch in any one namespace may start from it."""
        call = self._core.list_pod_for_all_namespaces(
            label_selector=label_selector,
            _preload_content=False,
            _request_timeout=self._timeout(),
        )
        return await self._json(call, "list pods in every namespace")

    async def list_events(self, namespace: str, *, field_selector: str) -> dict[str, Any]:
        """``GET /api/v1/namespaces/{namespace}/events?fieldSelector=...``."""
        return await self.list_pods(namespace, field_selector=field_selector, resource="events")

    async def create(self, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
        """``POST /api/v1/namespaces/{namespace}/pods``."""
        call = self._core.create_namespaced_pod(
            namespace, cast(Any, pod), _preload_content=False, _request_timeout=self._timeout()
        )
        return await self._json(call, f"create pod {namespace}/{pod['metadata']['name']}")

    async def delete(
        self, namespace: str, name: str, *, uid: str, grace: int | None
    ) -> dict[str, Any]:
        """``DELETE /api/v1/namespaces/{namespace}/pods/{name}``, only if the uid still matches."""
        options: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": uid},
        }
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        call = self._core.delete_namespaced_pod(
            name,
            namespace,
            body=cast(Any, options),
            _preload_content=False,
            _request_timeout=self._timeout(),
        )
        return await self._json(call, f"delete pod {namespace}/{name}")

    async def create_service(self, namespace: str, service: dict[str, Any]) -> dict[str, Any]:
        """``POST /api/v1/namespaces/{namespace}/services``."""
        call = self._core.create_namespaced_service(
            namespace, cast(Any, service), _preload_content=False, _request_timeout=self._timeout()
        )
        return await self._json(call, f"create service {namespace}/{service['metadata']['name']}")

    async def read_service(self, namespace: str, name: str) -> dict[str, Any]:
        """``GET /api/v1/namespaces/{namespace}/services/{name}``."""
        call = self._core.read_namespaced_service(
            name, namespace, _preload_content=False, _request_timeout=self._timeout()
        )
        return await self._json(call, f"get service {namespace}/{name}")

    async def replace_service(self, namespace: str, service: dict[str, Any]) -> dict[str, Any]:
        """``PUT /api/v1/namespaces/{namespace}/services/{name}``: ``service`` carries the
        ``resourceVersion`` it was read at (a 409 when it changed since)."""
        name = service["metadata"]["name"]
        call = self._core.replace_namespaced_service(
            name,
            namespace,
            cast(Any, service),
            _preload_content=False,
            _request_timeout=self._timeout(),
        )
        return await self._json(call, f"replace service {namespace}/{name}")

    async def delete_service(self, namespace: str, name: str, *, uid: str) -> dict[str, Any]:
        """``DELETE /api/v1/namespaces/{namespace}/services/{name}``, only if the uid matches."""
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        call = self._core.delete_namespaced_service(
            name,
            namespace,
            body=cast(Any, options),
            _preload_content=False,
            _request_timeout=self._timeout(),
        )
        return await self._json(call, f"delete service {namespace}/{name}")

    async def delete_collection(
        self, namespace: str, *, label_selector: str, grace: int | None
    ) -> dict[str, Any]:
        """``DELETE /api/v1/namespaces/{namespace}/pods?labelSelector=...``.

        Answers the matched Pods as they were *before* the delete.
        """
        extra: dict[str, Any] = {} if grace is None else {"grace_period_seconds": grace}
        call = self._core.delete_collection_namespaced_pod(
            namespace,
            label_selector=label_selector,
            **extra,
            _preload_content=False,
            _request_timeout=self._timeout(),
        )
        return await self._json(call, f"delete pods {label_selector!r} in {namespace}")

    @asynccontextmanager
    async def watch(
        self,
        namespace: str,
        *,
        resource_version: str,
        timeout_seconds: int,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource: Resource = "pods",
    ) -> AsyncIterator[JSONLines]:
        """``GET /api/v1/namespaces/{namespace}/pods?watch=1&resourceVersion=...`` (or events).

        The server ends the stream after ``timeout_seconds``; the client gives up on a stream
        silent for longer than that plus ``request_timeout``.
        """
        timeout = aiohttp.ClientTimeout(
            sock_connect=self.request_timeout, sock_read=timeout_seconds + self.request_timeout
        )
        call = _LISTS[resource](self.client)(
            namespace,
            **_selectors(label_selector, field_selector),
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            _preload_content=False,
            _request_timeout=timeout,
        )
        what = f"watch {resource} in {namespace}"
        response = await self._open(call, what)
        async with response:
            yield JSONLines(response, what)

    @asynccontextmanager
    async def log_lines(
        self, namespace: str, name: str, *, container: str, follow: bool, **options: Any
    ) -> AsyncIterator[TextLines]:
        """``GET /api/v1/namespaces/{namespace}/pods/{name}/log?container=...&follow=...``.

        ``options``: ``tail_lines``, ``since_seconds``, ``timestamps``, as the API names them.
        """
        timeout = aiohttp.ClientTimeout(sock_connect=self.request_timeout)
        if not follow:
            timeout = self._timeout()
        call = self._core.read_namespaced_pod_log(
            name,
            namespace,
            container=container,
            follow=follow,
            _preload_content=False,
            _request_timeout=timeout,
            **options,
        )
        what = f"logs of {namespace}/{name}/{container}"
        response = await self._open(call, what)
        async with response:
            yield TextLines(response, what)

    async def exec(
        self,
        namespace: str,
        name: str,
        *,
        container: str,
        command: list[str],
        on_output: Callable[[str], None] | None = None,
    ) -> tuple[int, str]:
        """``GET .../pods/{name}/exec`` upgraded to a websocket; the exit code and the output.

        stdout and stderr are interleaved as they arrive; the exit code comes from the Status
        on the error channel (-1 when the server sent none).
        """
        what = f"exec in {namespace}/{name}/{container}"
        output: list[str] = []
        exit_code = -1
        if self._ws is None:
            self._ws = WsApiClient(self.client.configuration)
        with map_errors(what):
            connecting = await CoreV1Api(self._ws).connect_get_namespaced_pod_exec(
                name,
                namespace,
                command=cast(Any, command),
                container=container,
                stderr=True,
                stdin=False,
                stdout=True,
                tty=False,
                _preload_content=False,
            )
            async with cast(Any, connecting) as socket:
                async for message in socket:
                    data = message.data
                    if isinstance(data, str):
                        data = data.encode()
                    if not isinstance(data, bytes) or not data:
                        continue
                    channel, payload = data[0], data[1:]
                    if channel in (STDOUT, STDERR):
                        text = payload.decode(errors="replace")
                        output.append(text)
                        if on_output is not None:
                            on_output(text)
                    elif channel == ERROR and payload:
                        exit_code = _exit_code(payload, what)
        return exit_code, "".join(output)


def _exit_code(payload: bytes, what: str) -> int:
    """The exit code from the Status an exec ends with on its error channel."""
    status = json.loads(payload)
    if status.get("status") == "Success":
        return 0
    causes = (status.get("details") or {}).get("causes") or []
    for cause in causes:
        if cause.get("reason") == "ExitCode":
            return int(cause["message"])
    raise status_error(int(status.get("code") or 500), status, what)


def _selectors(label_selector: str | None, field_selector: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if label_selector:
        out["label_selector"] = label_selector
    if field_selector:
        out["field_selector"] = field_selector
    return out
