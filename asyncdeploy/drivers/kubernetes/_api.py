"""The calls the driver makes to the API server, as plain JSON in and out.

Every call goes through kubernetes-asyncio's ``ApiClient.call_api`` (the transport the generated
API classes use: the kubeconfig's TLS, bearer tokens and their refresh) with a path built here
and ``_preload_content=False``, and parses the JSON itself: the generated models get real answers
wrong (a collection delete answers a ``PodList`` that the client squeezes into a ``V1Status``,
dropping the items; a watch ``BOOKMARK`` carries ``containers: null``, which ``V1PodSpec``
refuses), and neither they nor the generated API classes are imported (:mod:`._library`).
Statuses and transport errors are mapped here (:mod:`._errors`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, Literal, cast
from urllib.parse import quote

import aiohttp

from asyncdeploy._errors import EngineAPIError, EngineUnavailable
from asyncdeploy.drivers.kubernetes._errors import ENGINE, map_errors, status_error
from asyncdeploy.drivers.kubernetes._library import ApiClient, websocket_client

__all__ = ["JSONLines", "PodAPI", "Resource", "TextLines", "resource_path"]

STDOUT, STDERR, ERROR = 1, 2, 3  # exec channels (v4.channel.k8s.io)
Resource = Literal["pods", "events", "services", "endpointslices", "configmaps"]
_GROUPS: dict[str, str] = {"endpointslices": "/apis/discovery.k8s.io/v1"}  # the rest: core v1
Query = Iterable[tuple[str, Any]]


def resource_path(resource: Resource, namespace: str | None, name: str | None = None) -> str:
    """``/api/v1/namespaces/{namespace}/pods[/{name}]`` (``namespace`` None: every namespace's)."""
    path = _GROUPS.get(resource, "/api/v1")
    if namespace is not None:
        path += f"/namespaces/{quote(namespace, safe='')}"
    path += f"/{resource}"
    return path if name is None else f"{path}/{quote(name, safe='')}"


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
    """Pods (and their Events, Services, slices, ConfigMaps) in one cluster, through one
    ``ApiClient`` (never the global default client)."""

    def __init__(self, client: ApiClient, *, request_timeout: float = 30.0) -> None:
        self.client = client
        self.request_timeout = request_timeout
        self._ws: ApiClient | None = None  # for exec, made on first use (a second session)

    async def aclose(self) -> None:
        try:
            if self._ws is not None:
                await self._ws.close()
        finally:
            await self.client.close()

    # --- plumbing ------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Query = (),
        body: Any = None,
        timeout: aiohttp.ClientTimeout | None = None,
        accept: str = "application/json",
        client: ApiClient | None = None,
        headers: dict[str, str] | None = None,
    ) -> Awaitable[object]:
        """The request, as the generated API classes send it: the client's auth settings, the
        answer left unread (``_preload_content=False``)."""
        headers = {**(headers or {}), "Accept": accept}
        if body is not None:
            headers["Content-Type"] = "application/json"
        return cast(
            Awaitable[object],
            (client or self.client).call_api(
                path,
                method,
                query_params=[(key, value) for key, value in query if value is not None],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout or self._timeout(),
            ),
        )

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

    async def call(
        self, method: str, path: str, what: str, *, query: Query = (), body: Any = None
    ) -> dict[str, Any]:
        """One request answered with JSON; the mapped error when it fails (named ``what``)."""
        return await self._json(self._send(method, path, query=query, body=body), what)

    def _timeout(self) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=self.request_timeout)

    # --- calls ---------------------------------------------------------------------------

    async def version(self) -> dict[str, Any]:
        """``GET /version``."""
        return await self.call("GET", "/version/", "GET /version")

    async def read(self, namespace: str, name: str) -> dict[str, Any]:
        """``GET /api/v1/namespaces/{namespace}/pods/{name}``."""
        path = resource_path("pods", namespace, name)
        return await self.call("GET", path, f"get pod {namespace}/{name}")

    async def read_node(self, name: str) -> dict[str, Any]:
        """``GET /api/v1/nodes/{name}``."""
        return await self.call("GET", f"/api/v1/nodes/{quote(name, safe='')}", f"get node {name}")

    async def read_node_lease(self, name: str) -> dict[str, Any]:
        """``GET`` the node's heartbeat, its Lease in ``kube-node-lease``."""
        path = (
            f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{quote(name, safe='')}"
        )
        return await self.call("GET", path, f"get the lease of node {name}")

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
        return await self.call(
            "GET",
            resource_path(resource, namespace),
            f"list {resource} in {namespace}",
            query=_selectors(label_selector, field_selector),
        )

    async def list_pods_everywhere(self, *, label_selector: str) -> dict[str, Any]:
        """``GET /api/v1/pods?labelSelector=...``: the Pods of every namespace (``-A``); its
        resourceVersion is the cluster's, so a watch in any one namespace may start from it."""
        return await self.call(
            "GET",
            resource_path("pods", None),
            "list pods in every namespace",
            query=_selectors(label_selector, None),
        )

    async def list_events(self, namespace: str, *, field_selector: str) -> dict[str, Any]:
        """``GET /api/v1/namespaces/{namespace}/events?fieldSelector=...``."""
        return await self.list_pods(namespace, field_selector=field_selector, resource="events")

    async def create(self, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
        """``POST /api/v1/namespaces/{namespace}/pods``."""
        what = f"create pod {namespace}/{pod['metadata']['name']}"
        return await self.call("POST", resource_path("pods", namespace), what, body=pod)

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
        path = resource_path("pods", namespace, name)
        return await self.call("DELETE", path, f"delete pod {namespace}/{name}", body=options)

    async def create_service(self, namespace: str, service: dict[str, Any]) -> dict[str, Any]:
        """``POST /api/v1/namespaces/{namespace}/services``."""
        what = f"create service {namespace}/{service['metadata']['name']}"
        return await self.call("POST", resource_path("services", namespace), what, body=service)

    async def read_service(self, namespace: str, name: str) -> dict[str, Any]:
        """``GET /api/v1/namespaces/{namespace}/services/{name}``."""
        path = resource_path("services", namespace, name)
        return await self.call("GET", path, f"get service {namespace}/{name}")

    async def replace_service(self, namespace: str, service: dict[str, Any]) -> dict[str, Any]:
        """``PUT /api/v1/namespaces/{namespace}/services/{name}``: ``service`` carries the
        ``resourceVersion`` it was read at (a 409 when it changed since)."""
        name = service["metadata"]["name"]
        path = resource_path("services", namespace, name)
        return await self.call("PUT", path, f"replace service {namespace}/{name}", body=service)

    async def delete_service(self, namespace: str, name: str, *, uid: str) -> dict[str, Any]:
        """``DELETE /api/v1/namespaces/{namespace}/services/{name}``, only if the uid matches."""
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        path = resource_path("services", namespace, name)
        return await self.call("DELETE", path, f"delete service {namespace}/{name}", body=options)

    async def delete_collection(
        self, namespace: str, *, label_selector: str, grace: int | None
    ) -> dict[str, Any]:
        """``DELETE /api/v1/namespaces/{namespace}/pods?labelSelector=...``.

        Answers the matched Pods as they were *before* the delete.
        """
        return await self.call(
            "DELETE",
            resource_path("pods", namespace),
            f"delete pods {label_selector!r} in {namespace}",
            query=[("labelSelector", label_selector), ("gracePeriodSeconds", grace)],
        )

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
        query = [
            *_selectors(label_selector, field_selector),
            ("watch", True),
            ("allowWatchBookmarks", True),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", timeout_seconds),
        ]
        call = self._send("GET", resource_path(resource, namespace), query=query, timeout=timeout)
        what = f"watch {resource} in {namespace}"
        response = await self._open(call, what)
        async with response:
            yield JSONLines(response, what)

    @asynccontextmanager
    async def log_lines(
        self,
        namespace: str,
        name: str,
        *,
        container: str,
        follow: bool,
        tail_lines: int | None = None,
        since_seconds: int | None = None,
        timestamps: bool = False,
    ) -> AsyncIterator[TextLines]:
        """``GET /api/v1/namespaces/{namespace}/pods/{name}/log?container=...&follow=...``."""
        timeout = aiohttp.ClientTimeout(sock_connect=self.request_timeout)
        if not follow:
            timeout = self._timeout()
        query = [
            ("container", container),
            ("follow", follow),
            ("sinceSeconds", since_seconds),
            ("tailLines", tail_lines),
            ("timestamps", timestamps),
        ]
        path = resource_path("pods", namespace, name) + "/log"
        call = self._send("GET", path, query=query, timeout=timeout, accept="*/*")
        what = f"logs of {namespace}/{name}/{container}"
        response = await self._open(call, what)
        async with response:
            yield TextLines(response, what)

    async def proxy_get(
        self, namespace: str, name: str, *, port: int, path: str, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        """``GET .../pods/{name}:{port}/proxy/{path}`` (the API server relays it to the Pod);
        the status and the body (an error status raises, as every call here)."""
        what = f"GET {path} on {namespace}/{name}:{port}"
        proxy = resource_path("pods", namespace, f"{name}:{port}") + "/proxy/" + path.lstrip("/")
        response = await self._open(self._send("GET", proxy, accept="*/*", headers=headers), what)
        with map_errors(what):
            async with response:
                return response.status, await response.read()

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
            self._ws = websocket_client(self.client.configuration)
        query = [
            ("command", command),  # the websocket client sends one parameter per word
            ("container", container),
            ("stderr", True),
            ("stdin", False),
            ("stdout", True),
            ("tty", False),
        ]
        path = resource_path("pods", namespace, name) + "/exec"
        with map_errors(what):
            connecting = await self._send("GET", path, query=query, accept="*/*", client=self._ws)
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


def _selectors(label_selector: str | None, field_selector: str | None) -> list[tuple[str, str]]:
    out = []
    if label_selector:
        out.append(("labelSelector", label_selector))
    if field_selector:
        out.append(("fieldSelector", field_selector))
    return out
