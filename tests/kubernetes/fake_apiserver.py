"""An in-process kube-apiserver, scheduler and kubelet on aiohttp, for the driver's tests.

It reproduces what the recordings in ``recordings/`` show a real kube-apiserver v1.36 doing (the
server-side rules live in :mod:`fake_pods`, the node's in :mod:`fake_kubelet`;
``test_fake_matches_recordings`` holds them to the recordings):

* create: validation (422), quantity decoding (400), every server default, the stored object as
  the answer (201); a duplicate name is 409 AlreadyExists;
* a global ``resourceVersion`` counter, ``generation`` bumped by the first graceful delete;
* DELETE: graceful for a bound Pod (``deletionTimestamp`` = the request's second + grace,
  ``deletionGracePeriodSeconds``; a longer grace later is a no-op, a shorter one moves the
  deadline), immediate for an unbound or finished Pod and for grace 0 (MODIFIED with dGP 0, then
  DELETED); ``preconditions.uid`` mismatch → 409 Conflict; the collection delete answers the
  matched Pods as they were *before*; 405 when the collection verb is switched off;
* watches: chunked JSON lines; from a ``resourceVersion``: the events since then, then live ones;
  without one: synthetic ADDED; a compacted version: one ``ERROR`` 410 event, then the end;
  ``timeoutSeconds`` ends the stream cleanly (after a BOOKMARK when bookmarks were asked for);
* a scheduler that binds each Pod (``nodeName``, ``PodScheduled``), and a kubelet that starts
  its containers (init containers run to completion first) and, on deletion, runs each
  container's preStop time, "sends SIGTERM" and lets the container exit as its
  :class:`ContainerScript` says — or kills it with 137 at the deadline — then reports the
  terminal phase and makes the final delete (MODIFIED with dGP 0, then DELETED);
* Events, as the kubelet records them (``recordings/08*``): ``Killing`` ("Stopping container X")
  when it starts to stop a container, ``FailedPreStopHook`` when a hook fails or runs past the
  deadline; listed and watched like Pods, by ``involvedObject`` field selectors;
* logs (``follow`` too) and exec over a ``v4.channel.k8s.io`` websocket;
* bearer-token auth (401), injected failures (403, 5xx, delays), dropped or expired watches.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import anyio
import attrs
import fake_kubelet as kubelet
import fake_pods as k8s
from aiohttp import web
from fake_kubelet import ContainerScript

NODE = "fake-node-1"
NAMESPACE = "asyncdeploy-test"  # where the driver tests work
TOKEN = "fake-token"
_POD = re.compile(r"/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(?:/(log|exec))?")
_EVENTS = re.compile(r"/api/v1/namespaces/([^/]+)/events")
_SERVICES = re.compile(r"/api/v1/namespaces/([^/]+)/services(?:/([^/]+))?")
_CONFIGMAPS = re.compile(r"/api/v1/namespaces/([^/]+)/configmaps(?:/([^/]+))?")
_SLICES = re.compile(r"/apis/discovery.k8s.io/v1/namespaces/([^/]+)/endpointslices")
_NODE = re.compile(r"/api/v1/nodes/([^/]+)")
_LEASE = re.compile(r"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/([^/]+)")
LEASE_SECONDS = 40  # the kubelet's default nodeLeaseDurationSeconds; it renews every 10 s


@attrs.define
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: Any = None

    @property
    def writes(self) -> bool:
        return self.method in ("POST", "PUT", "PATCH", "DELETE")


@attrs.define
class _Injected:
    method: str
    path: re.Pattern[str]
    status: int | None
    times: int
    delay: float
    watch: bool | None
    retry_after: int | None = None


@attrs.define(eq=False)
class _Watcher:
    namespace: str
    match: Callable[[dict[str, Any]], bool]
    resource: str = "pods"
    queue: asyncio.Queue[Any] = attrs.Factory(asyncio.Queue)


_CLOSE, _ABORT = object(), object()
_BODY: web.RequestKey[Any] = web.RequestKey("body", object)


class FakeApiServer:
    """``async with FakeApiServer() as fake:`` — then point a kubeconfig at ``fake.url``."""

    def __init__(self, *, namespaces: Sequence[str] = ("default",)) -> None:
        self.namespaces = set(namespaces)
        self.accounts: set[tuple[str, str]] = set()
        self.scripts: dict[str, ContainerScript] = {}
        self.schedule = True
        self.dead_nodes: set[str] = set()  # bound there, a Pod never runs nor finishes deleting
        # A node whose kubelet stopped (lose_node): its Lease's last renewal (a UNIX time); its
        # Pods keep their last status, and a delete only marks them (10a: they stay Terminating)
        self.lost_nodes: dict[str, float] = {}
        self.start_delay = 0.02
        self.final_delay = 0.05
        # How late the status shows an exit the node did not cause (ContainerScript.exit_after):
        # the kubelet notices it at its next relist (every 1 s) and then writes the status. On
        # the project's cluster at load 9-11: 0.7-1.9 s after the (whole-second) finishedAt.
        self.exit_report_delay = 0.0
        self.allow_collection_delete = True
        self.exec_handler: Callable[[dict[str, Any], str, list[str]], tuple[str, str, int]] = (
            _default_exec
        )
        self.requests: list[Recorded] = []
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.services: dict[tuple[str, str], dict[str, Any]] = {}  # no endpointslice controller
        self.config_maps: dict[tuple[str, str], dict[str, Any]] = {}  # replace's locks
        self.events: list[tuple[int, str, dict[str, Any]]] = []  # the Pods' history
        self.kubelet_events: list[tuple[int, str, dict[str, Any]]] = []  # Event objects
        self.resource_version = 100
        self.oldest_version = 1
        self._nodes: dict[tuple[str, str], kubelet.Node] = {}
        self._watchers: set[_Watcher] = set()
        self._injected: list[_Injected] = []
        self._stack = AsyncExitStack()
        self._runner: web.AppRunner | None = None
        self.port = 0

    # --- life cycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._tg = await self._stack.enter_async_context(anyio.create_task_group())
        app = web.Application(middlewares=[self._middleware])
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(_CLOSE)
        for node in self._nodes.values():
            node.gone.set()
            node.log_changed.set()
        if self._runner is not None:
            await self._runner.cleanup()
        self._tg.cancel_scope.cancel()
        await self._stack.aclose()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self, path: Path, *, namespace: str = "default", token: str = TOKEN) -> Path:
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "fake", "user": {"token": token}}],
                    "contexts": [
                        {
                            "name": "fake",
                            "context": {"cluster": "fake", "user": "fake", "namespace": namespace},
                        }
                    ],
                    "current-context": "fake",
                }
            )
        )
        return path

    # --- test controls ---------------------------------------------------------------------

    def inject(
        self,
        method: str,
        path: str,
        status: int | None,
        *,
        times: int = 1,
        delay: float = 0.0,
        watch: bool | None = None,
        retry_after: int | None = None,
    ) -> None:
        """Answer the next ``times`` matching requests with ``status`` (after ``delay``).

        ``watch``: only watches (True) or only other requests (False) match. ``retry_after``:
        the answer asks the client to wait that long, as kube-apiserver's 429 (priority and
        fairness) and its 503s do: a ``Retry-After`` header and ``details.retryAfterSeconds``.
        ``status`` 0 cuts the connection without an answer.
        """
        self._injected.append(
            _Injected(method, re.compile(path), status, times, delay, watch, retry_after)
        )

    def calls(self, *, writes_only: bool = False) -> list[str]:
        return [f"{r.method} {r.path}" for r in self.requests if r.writes or not writes_only]

    def expire_watches(self) -> None:
        """Every open watch gets ``ERROR`` 410 and ends; older versions count as compacted."""
        self.oldest_version = self.resource_version
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(k8s.expired("0", self.oldest_version))

    def drop_watches(self) -> None:
        """Every open watch's connection is cut mid-stream."""
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(_ABORT)

    def open_watches(self, resource: str | None = None) -> int:
        """How many watches are open (of ``resource`` only: ``pods``, ``events``)."""
        return sum(1 for w in self._watchers if resource in (None, w.resource))

    def script(self, container: dict[str, Any]) -> ContainerScript:
        """The container's script: set by the test, else read from a ``trap ... TERM`` shell."""
        if container["name"] in self.scripts:
            return self.scripts[container["name"]]
        return kubelet.script_from_command(container.get("command") or [])

    def create_pod(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create a Pod directly (as another client would)."""
        return self._create(namespace, body, "kubectl-create")

    # --- HTTP ------------------------------------------------------------------------------

    @web.middleware
    async def _middleware(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        text = await request.text() if request.can_read_body else ""
        body = json.loads(text, parse_float=str) if text.strip() else None
        self.requests.append(Recorded(request.method, request.path, dict(request.query), body))
        request[_BODY] = body
        try:
            if request.headers.get("Authorization") != f"Bearer {TOKEN}":
                raise k8s.unauthorized()
            watching = _truthy(request.query.get("watch"))
            for rule in self._injected:
                if (
                    rule.times
                    and rule.method == request.method
                    and rule.path.fullmatch(request.path)
                    and rule.watch in (None, watching)
                ):
                    rule.times -= 1
                    await asyncio.sleep(rule.delay)
                    if rule.status == 0:
                        assert request.transport is not None
                        request.transport.abort()  # the connection is lost, no answer
                        return web.Response(status=500)
                    if rule.status is not None:
                        error = _canned(rule.status, request, rule.retry_after)
                        answer = web.json_response(error.body, status=error.status)
                        if rule.retry_after is not None:
                            answer.headers["Retry-After"] = str(rule.retry_after)
                        return answer
                    break
            return await handler(request)
        except k8s.APIError as exc:
            return web.json_response(exc.body, status=exc.status)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        method, path = request.method, request.path
        if path in ("/version", "/version/") and method == "GET":
            return web.json_response(
                {"major": "1", "minor": "36", "gitVersion": "v1.36.2", "platform": "linux/amd64"}
            )
        if (events := _EVENTS.fullmatch(path)) is not None and method == "GET":
            if _truthy(request.query.get("watch")):
                return await _watch(self, request, events[1], resource="events")
            return web.json_response(self._list_events(events[1], request.query))
        if (services := _SERVICES.fullmatch(path)) is not None:
            return self._named(self.services, "Service", method, services[1], services[2], request)
        if (maps := _CONFIGMAPS.fullmatch(path)) is not None:
            return self._named(self.config_maps, "ConfigMap", method, maps[1], maps[2], request)
        if (node := _NODE.fullmatch(path)) is not None and method == "GET":
            return web.json_response(self._node(node[1]))
        if (lease := _LEASE.fullmatch(path)) is not None and method == "GET":
            return web.json_response(self._lease(lease[1]))
        if _SLICES.fullmatch(path) is not None and method == "GET":
            return web.json_response(self._listing("EndpointSliceList", []))
        if path == "/api/v1/pods" and method == "GET":  # every namespace's (kubectl -A)
            return web.json_response(self._list(None, request.query))
        if path.startswith("/api/v1/namespaces") and not _POD.fullmatch(path):
            return self._namespaces(method, path, request[_BODY])
        match = _POD.fullmatch(path)
        if match is None:
            raise k8s.APIError(
                k8s.status_body(
                    404, "NotFound", "the server could not find the requested resource", {}
                )
            )
        namespace, name, sub = match[1], match[2], match[3]
        query = request.query
        if name is None:
            if method == "GET" and _truthy(query.get("watch")):
                return await _watch(self, request, namespace)
            if method == "GET":
                return web.json_response(self._list(namespace, query))
            if method == "POST":
                warnings: list[str] = []
                created = self._create(namespace, request[_BODY] or {}, _manager(request), warnings)
                answer = web.json_response(created, status=201)
                for warning in warnings:
                    answer.headers.add("Warning", warning)
                return answer
            if method == "DELETE":
                return web.json_response(self._delete_collection(namespace, query, request[_BODY]))
        elif sub == "log" and method == "GET":
            return await _logs(self, request, namespace, name)
        elif sub == "exec" and method in ("GET", "POST"):
            return await _exec(self, request, namespace, name)
        elif sub is None and method == "GET":
            return web.json_response(self._get(namespace, name))
        elif sub is None and method == "DELETE":
            return web.json_response(self._delete(namespace, name, query, request[_BODY]))
        raise k8s.method_not_allowed()

    def _listing(self, kind: str, items: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "kind": kind,
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self.resource_version)},
            "items": items,
        }

    def _named(
        self,
        store: dict[tuple[str, str], dict[str, Any]],
        kind: str,
        method: str,
        namespace: str,
        name: str | None,
        request: web.Request,
    ) -> web.StreamResponse:
        """Services and ConfigMaps, as far as the driver uses them: list by label, create (409
        for a taken name), get, replace (409 for a stale resourceVersion), uid-guarded delete
        (no ClusterIP allocation, no EndpointSlices: no controller runs here)."""
        if name is None and method == "GET":
            labels = k8s.label_matcher(request.query.get("labelSelector"))
            items = [
                copy.deepcopy(obj)
                for (ns, _), obj in sorted(store.items())
                if ns == namespace and labels(obj)
            ]
            return web.json_response(self._listing(f"{kind}List", items))
        if name is not None and method == "GET":
            found = store.get((namespace, name))
            if found is None:
                raise k8s.not_found(name)
            return web.json_response(copy.deepcopy(found))
        if name is None and method == "POST":
            body = copy.deepcopy(request[_BODY] or {})
            key = (namespace, body["metadata"]["name"])
            if key in store:
                raise k8s.already_exists(key[1])
            self.resource_version += 1
            body["metadata"].update(
                namespace=namespace,
                uid=f"{kind.lower()}-{self.resource_version}",
                resourceVersion=str(self.resource_version),
            )
            store[key] = body
            return web.json_response(body, status=201)
        if name is not None and method == "PUT":  # a replace, at the resourceVersion read
            found = store.get((namespace, name))
            if found is None:
                raise k8s.not_found(name)
            body = copy.deepcopy(request[_BODY] or {})
            if body["metadata"].get("resourceVersion") != found["metadata"]["resourceVersion"]:
                raise k8s.already_exists(name)  # a 409, as the API server's "modified"
            self.resource_version += 1
            body["metadata"].update(
                uid=found["metadata"]["uid"], resourceVersion=str(self.resource_version)
            )
            store[(namespace, name)] = body
            return web.json_response(body)
        if name is not None and method == "DELETE":
            found = store.get((namespace, name))
            if found is None:
                raise k8s.not_found(name)
            wanted = ((request[_BODY] or {}).get("preconditions") or {}).get("uid")
            if wanted and wanted != found["metadata"]["uid"]:
                raise k8s.uid_conflict(name, wanted, found["metadata"]["uid"])
            del store[(namespace, name)]
            return web.json_response(found)
        raise k8s.method_not_allowed()

    def _namespaces(self, method: str, path: str, body: Any) -> web.StreamResponse:
        """Just enough of namespaces and service accounts for ``test_real_cluster``'s set-up:
        a new namespace gets its ``default`` account at once (kube-controller-manager's job)."""
        parts = path.strip("/").split("/")[3:]  # after api/v1/namespaces
        if method == "POST" and not parts:
            self.namespaces.add(body["metadata"]["name"])
            self.accounts.add((body["metadata"]["name"], "default"))
            return web.json_response({"kind": "Namespace", **body}, status=201)
        if method == "DELETE" and len(parts) == 1:
            for key in [k for k in self.pods if k[0] == parts[0]]:
                self._delete_pod(key, 0)
            self.namespaces.discard(parts[0])
            return web.json_response({"kind": "Namespace", "metadata": {"name": parts[0]}})
        if len(parts) >= 2 and parts[1] == "serviceaccounts":
            if method == "POST":
                self.accounts.add((parts[0], body["metadata"]["name"]))
                return web.json_response({"kind": "ServiceAccount", **body}, status=201)
            if (parts[0], parts[-1]) not in self.accounts:
                raise k8s.not_found(parts[-1], "serviceaccounts")
            return web.json_response({"kind": "ServiceAccount", "metadata": {"name": parts[-1]}})
        raise k8s.method_not_allowed()

    # --- the store -------------------------------------------------------------------------

    def _write(self, key: tuple[str, str], pod: dict[str, Any], kind: str) -> dict[str, Any]:
        self.resource_version += 1
        pod["metadata"]["resourceVersion"] = str(self.resource_version)
        if kind == "DELETED":
            self.pods.pop(key, None)
            node = self._nodes.pop(key, None)
            if node is not None:
                node.gone.set()
                node.log_changed.set()
        else:
            self.pods[key] = pod
        snapshot = copy.deepcopy(pod)
        self.events.append((self.resource_version, kind, snapshot))
        for watcher in list(self._watchers):
            if (
                watcher.resource == "pods"
                and watcher.namespace == key[0]
                and watcher.match(snapshot)
            ):
                watcher.queue.put_nowait((self.resource_version, kind, snapshot))
        return copy.deepcopy(pod)

    def record_event(self, node: kubelet.Node, container: str, reason: str, message: str) -> None:
        """An Event the kubelet records about one of a Pod's containers (shaped as in 08*).

        The same Event again (same Pod, container, reason and message: client-go's event
        correlator) is the stored one with ``count`` bumped and a new ``lastTimestamp``,
        MODIFIED under its old name, as the kubelet's recorder does.
        """
        self.resource_version += 1
        now = datetime.now(UTC)
        stamp = k8s.rfc3339(now.replace(microsecond=0))
        namespace, pod_name = node.key
        for _, _, known in reversed(self.kubelet_events):
            involved = known["involvedObject"]
            if (
                involved["uid"] == node.uid
                and involved["fieldPath"] == f"spec.containers{{{container}}}"
                and (known["reason"], known["message"]) == (reason, message)
            ):
                bumped = copy.deepcopy(known)
                bumped["count"] += 1
                bumped["lastTimestamp"] = stamp
                bumped["metadata"]["resourceVersion"] = str(self.resource_version)
                self._event_written(namespace, bumped, "MODIFIED")
                return
        event = {
            "kind": "Event",
            "apiVersion": "v1",
            "metadata": {
                "name": f"{pod_name}.{int(now.timestamp() * 1e9):x}",
                "namespace": namespace,
                "uid": f"event-{self.resource_version}",
                "resourceVersion": str(self.resource_version),
                "creationTimestamp": stamp,
            },
            "involvedObject": {
                "kind": "Pod",
                "namespace": namespace,
                "name": pod_name,
                "uid": node.uid,
                "apiVersion": "v1",
                "resourceVersion": (self.pods.get(node.key) or {})
                .get("metadata", {})
                .get("resourceVersion", ""),
                "fieldPath": f"spec.containers{{{container}}}",
            },
            "reason": reason,
            "message": message,
            "source": {"component": "kubelet", "host": NODE},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "type": "Normal" if reason == "Killing" else "Warning",
            "eventTime": None,
            "reportingComponent": "kubelet",
            "reportingInstance": NODE,
        }
        self._event_written(namespace, event, "ADDED")

    def _event_written(self, namespace: str, event: dict[str, Any], kind: str) -> None:
        name = event["metadata"]["name"]
        self.kubelet_events = [e for e in self.kubelet_events if e[2]["metadata"]["name"] != name]
        self.kubelet_events.append((self.resource_version, kind, event))
        for watcher in list(self._watchers):
            wanted = watcher.resource == "events" and watcher.namespace == namespace
            if wanted and watcher.match(event):
                watcher.queue.put_nowait((self.resource_version, kind, copy.deepcopy(event)))

    def _list_events(self, namespace: str, query: Any) -> dict[str, Any]:
        match = _event_matcher(query.get("fieldSelector"))
        items = [
            copy.deepcopy(e)
            for _, _, e in self.kubelet_events
            if e["metadata"]["namespace"] == namespace and match(e)
        ]
        return {
            "kind": "EventList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self.resource_version)},
            "items": items,
        }

    def _get(self, namespace: str, name: str) -> dict[str, Any]:
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise k8s.not_found(name)
        return copy.deepcopy(pod)

    def _list(self, namespace: str | None, query: Any) -> dict[str, Any]:
        """The Pods of ``namespace`` (None: of every namespace) that the selectors match."""
        labels = k8s.label_matcher(query.get("labelSelector"))
        fields = k8s.field_matcher(query.get("fieldSelector"))
        items = []
        for (ns, _), pod in sorted(self.pods.items()):
            if namespace in (None, ns) and labels(pod) and fields(pod):
                item = copy.deepcopy(pod)
                item.pop("kind"), item.pop("apiVersion")
                items.append(item)
        return {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self.resource_version)},
            "items": items,
        }

    def _create(
        self,
        namespace: str,
        body: dict[str, Any],
        manager: str,
        warnings: list[str] | None = None,
    ) -> dict[str, Any]:
        if namespace not in self.namespaces:
            raise k8s.not_found(namespace, "namespaces")
        sent_ns = (body.get("metadata") or {}).get("namespace")
        if sent_ns not in (None, namespace):
            raise k8s.bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        pod = k8s.defaulted_pod(
            body, namespace=namespace, manager=manager, now=datetime.now(UTC), warnings=warnings
        )
        key = (namespace, pod["metadata"]["name"])
        if key in self.pods:
            raise k8s.already_exists(key[1])
        created = self._write(key, pod, "ADDED")
        node = kubelet.Node(key=key, uid=pod["metadata"]["uid"])
        self._nodes[key] = node
        if self.schedule and not pod["spec"].get("nodeName"):
            self._tg.start_soon(self._bind_and_run, node)
        elif pod["spec"].get("nodeName") not in (None, *self.dead_nodes):
            self._tg.start_soon(self._run, node)
        return created

    def _delete(
        self, namespace: str, name: str, query: Any, body: dict[str, Any] | None
    ) -> dict[str, Any]:
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise k8s.not_found(name)
        options = body or {}
        wanted_uid = (options.get("preconditions") or {}).get("uid")
        if wanted_uid and wanted_uid != pod["metadata"]["uid"]:
            raise k8s.uid_conflict(name, wanted_uid, pod["metadata"]["uid"])
        grace = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
        return self._delete_pod((namespace, name), None if grace is None else int(grace))

    def _delete_pod(self, key: tuple[str, str], grace: int | None) -> dict[str, Any]:
        pod = copy.deepcopy(self.pods[key])
        metadata = pod["metadata"]
        if grace is None:
            grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
        grace = 1 if grace < 0 else grace
        node = self._nodes.get(key)
        now = k8s.truncated_now()
        unbound = not pod["spec"].get("nodeName")
        finished = pod["status"].get("phase") in ("Succeeded", "Failed")
        if grace == 0 or unbound or finished or node is None:
            if metadata.get("deletionTimestamp") is None:
                metadata["generation"] += 1
            metadata["deletionTimestamp"] = k8s.rfc3339(now)
            metadata["deletionGracePeriodSeconds"] = 0
            answer = self._write(key, pod, "MODIFIED")
            self._write(key, copy.deepcopy(pod), "DELETED")
            if node is not None:
                node.stopping.set()
            return answer
        change = k8s.graceful_deletion(metadata, grace, now)
        if change is None:
            return pod  # nothing written: the current object, its resourceVersion unchanged
        first = metadata.get("deletionTimestamp") is None
        metadata["deletionTimestamp"], metadata["deletionGracePeriodSeconds"] = change
        if first:
            metadata["generation"] += 1
            node.stop_at, node.grace = anyio.current_time(), grace
        answer = self._write(key, _metadata_first(pod), "MODIFIED")
        if pod["spec"].get("nodeName") not in self.lost_nodes:  # a stopped kubelet never acts
            node.stopping.set()  # the kubelet keeps its first deadline, as observed (03a, 03h)
        return answer

    # --- the nodes: each one's Node and its heartbeat, its Lease (10a) -----------------------

    def lose_node(self, name: str, *, silent_for: float) -> None:
        """Node ``name``'s kubelet stopped ``silent_for`` seconds ago (by the wall clock: the
        driver compares the Lease's renewTime with it): its Lease is not renewed since, its
        Node stays Ready (no node lifecycle controller, as on the project's cluster), and a
        delete of a Pod there leaves it Terminating, its status as it was."""
        self.lost_nodes[name] = time.time() - silent_for

    def _known_node(self, name: str) -> bool:
        bound = {p["spec"].get("nodeName") for p in self.pods.values()}
        return name == NODE or name in self.lost_nodes or name in bound - self.dead_nodes

    def _node(self, name: str) -> dict[str, Any]:
        if not self._known_node(name):
            raise k8s.not_found(name, "nodes")
        heartbeat = k8s.rfc3339(k8s.truncated_now())
        return {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",  # 10a: nobody sets it Unknown without the controller
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": heartbeat,
                        "lastTransitionTime": heartbeat,
                    }
                ]
            },
        }

    def _lease(self, name: str) -> dict[str, Any]:
        if not self._known_node(name):
            raise k8s.not_found(name, "leases.coordination.k8s.io")
        renewed = self.lost_nodes.get(name, time.time())
        return {
            "kind": "Lease",
            "apiVersion": "coordination.k8s.io/v1",
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": datetime.fromtimestamp(renewed, UTC).strftime(
                    "%Y-%m-%dT%H:%M:%S.%fZ"  # a MicroTime
                ),
            },
        }

    def _delete_collection(
        self, namespace: str, query: Any, body: dict[str, Any] | None
    ) -> dict[str, Any]:
        if not self.allow_collection_delete:
            raise k8s.method_not_allowed()
        listing = self._list(namespace, query)
        options = body or {}
        grace = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
        wanted_uid = (options.get("preconditions") or {}).get("uid")
        for item in listing["items"]:  # one by one: not atomic (04c)
            name = item["metadata"]["name"]
            if wanted_uid and wanted_uid != item["metadata"]["uid"]:
                raise k8s.uid_conflict(name, wanted_uid, item["metadata"]["uid"])
            self._delete_pod((namespace, name), None if grace is None else int(grace))
        return listing

    # --- the scheduler and the kubelet -----------------------------------------------------

    def _update(
        self,
        node: kubelet.Node,
        change: Callable[[dict[str, Any]], None],
        *,
        by_kubelet: bool = True,
    ) -> None:
        """Write a change of the Pod; the kubelet's status writes are on record in its
        ``managedFields`` (manager ``kubelet``, subresource ``status``, the time of the last)."""
        pod = self.pods.get(node.key)
        if pod is None or pod["metadata"]["uid"] != node.uid:
            return
        pod = copy.deepcopy(pod)
        change(pod)
        if by_kubelet:
            kubelet.record_status_write(pod)
        self._write(node.key, pod, "MODIFIED")

    async def _bind_and_run(self, node: kubelet.Node) -> None:
        await anyio.sleep(self.start_delay / 2)

        def bind(pod: dict[str, Any]) -> None:
            pod["spec"]["nodeName"] = NODE
            pod["spec"] = k8s.ordered(pod["spec"], k8s.SPEC_ORDER)
            pod["status"]["conditions"] = [kubelet.condition("PodScheduled", True)]

        self._update(node, bind, by_kubelet=False)  # the scheduler's
        await self._run(node)

    async def _run(self, node: kubelet.Node) -> None:
        pod: dict[str, Any] = {}  # as the node started it
        await anyio.sleep(self.start_delay)
        if not node.stopping.is_set():
            self._update(node, lambda pod: kubelet.start_status(pod, False, self.script))
            await anyio.sleep(self.start_delay)
        if not node.stopping.is_set():
            node.started = True
            pod = self.pods.get(node.key) or {}
            for _, container in kubelet.containers(pod):
                script = self.script(container)
                for line in script.logs:
                    node.log(container["name"], line)
            self._update(node, lambda pod: kubelet.start_status(pod, True, self.script))
            node.poke()
            async with anyio.create_task_group() as tg:
                for _, container in kubelet.containers(pod):
                    script = self.script(container)
                    if container.get("readinessProbe") and script.ready_after > 0:
                        tg.start_soon(
                            self._ready_later, node, container["name"], script.ready_after
                        )
                    if script.exit_after is not None and script.exit_on_start is None:
                        tg.start_soon(self._exit_later, node, container["name"], script)
                await node.stopping.wait()
                tg.cancel_scope.cancel()
        else:
            await node.stopping.wait()
        if node.gone.is_set():  # removed at once (grace 0): the node stops it out of sight
            for _, container in kubelet.containers(pod):
                name = container["name"]
                self.record_event(node, name, "Killing", f"Stopping container {name}")
            return
        async with anyio.create_task_group() as tg:
            for _, container in kubelet.containers(self.pods.get(node.key) or {}):
                tg.start_soon(self._stop, node, container)
        await anyio.sleep(self.final_delay)
        current = self.pods.get(node.key)
        if current is None or current["metadata"]["uid"] != node.uid:
            return
        final = copy.deepcopy(current)
        final["metadata"]["deletionTimestamp"] = k8s.rfc3339(k8s.truncated_now())
        final["metadata"]["deletionGracePeriodSeconds"] = 0
        self._write(node.key, final, "MODIFIED")
        self._write(node.key, copy.deepcopy(final), "DELETED")

    async def _exit_later(
        self, node: kubelet.Node, name: str, script: kubelet.ContainerScript
    ) -> None:
        """The container ends on its own after ``exit_after``; the status shows it
        ``exit_report_delay`` later, with the time it ended."""
        assert script.exit_after is not None
        await anyio.sleep(script.exit_after)
        ended = datetime.now(UTC)
        node.log(name, f"exited {script.exit_code}")
        await anyio.sleep(self.exit_report_delay)
        self._update(node, lambda pod: kubelet.terminate(pod, name, script.exit_code, ended))

    async def _ready_later(self, node: kubelet.Node, name: str, delay: float) -> None:
        await anyio.sleep(delay)

        def ready(pod: dict[str, Any]) -> None:
            for entry in pod["status"].get("containerStatuses") or []:
                if entry["name"] == name:
                    entry["ready"] = True
            kubelet.set_ready_conditions(pod)

        self._update(node, ready)

    async def _stop(self, node: kubelet.Node, container: dict[str, Any]) -> None:
        name = container["name"]
        entry = kubelet.status_entry(self.pods.get(node.key) or {}, name)
        if entry is None or "running" not in (entry.get("state") or {}):
            return
        script = self.script(container)
        kill_at = node.stop_at + node.grace
        self.record_event(node, name, "Killing", f"Stopping container {name}")
        if (container.get("lifecycle") or {}).get("preStop"):
            await anyio.sleep(max(0.0, min(script.prestop, kill_at - anyio.current_time())))
            if script.prestop_fails or anyio.current_time() >= kill_at:
                self.record_event(node, name, "FailedPreStopHook", "PreStopHook failed")
        if anyio.current_time() < kill_at:
            node.log(name, "got TERM")
        exit_at = anyio.current_time() + script.drain
        if script.ignore_term or exit_at >= kill_at:
            await anyio.sleep(max(0.0, kill_at - anyio.current_time()))
            code = 137
        else:
            await anyio.sleep(script.drain)
            code = script.exit_code
            node.log(name, f"exiting {code}")
        self._update(node, lambda pod: kubelet.terminate(pod, name, code))
        node.poke()


# --- the watch, logs and exec handlers -------------------------------------------------------


async def _write_line(response: web.StreamResponse, data: dict[str, Any]) -> None:
    await response.write(json.dumps(data, separators=(",", ":")).encode() + b"\n")


def _without_kind(pod: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in pod.items() if k not in ("kind", "apiVersion")}


def _event_matcher(selector: str | None) -> Callable[[dict[str, Any]], bool]:
    """``involvedObject.uid=``, ``.name=``, ``.kind=`` (what the driver and the tests ask)."""
    tests = []
    for part in filter(None, (selector or "").split(",")):
        m = re.fullmatch(r"involvedObject\.(uid|name|kind)\s*==?\s*(.*)", part)
        if m is None:
            raise k8s.bad_request(f'field label not supported: "{part}"')
        tests.append((m[1], m[2]))
    return lambda event: all(event["involvedObject"].get(f) == v for f, v in tests)


async def _watch(
    server: FakeApiServer, request: web.Request, namespace: str, resource: str = "pods"
) -> web.StreamResponse:
    query = request.query
    if resource == "events":
        labels: Callable[[dict[str, Any]], bool] = lambda _: True
        fields = _event_matcher(query.get("fieldSelector"))
        history = server.kubelet_events
    else:
        labels = k8s.label_matcher(query.get("labelSelector"))
        fields = k8s.field_matcher(query.get("fieldSelector"))
        history = server.events
    version = query.get("resourceVersion", "")
    if version not in ("", "0") and not version.isdigit():
        raise k8s.APIError(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f'resourceVersion: Invalid value: "{version}": strconv.ParseUint: '
                f'parsing "{version}": invalid syntax',
                "code": 500,
            }
        )
    bookmarks = _truthy(query.get("allowWatchBookmarks"))
    timeout = float(query.get("timeoutSeconds", "1800"))
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    watcher = _Watcher(namespace, lambda pod: labels(pod) and fields(pod), resource)
    server._watchers.add(watcher)
    try:
        sent = server.resource_version
        if version in ("", "0") and resource == "events":
            for _, _, event in list(history):
                if event["metadata"]["namespace"] == namespace and watcher.match(event):
                    await _write_line(response, {"type": "ADDED", "object": event})
        elif version in ("", "0"):  # synthetic ADDED for what exists (05e, etcd 3.6)
            for (ns, _), pod in sorted(server.pods.items()):
                if ns == namespace and watcher.match(pod):
                    await _write_line(response, {"type": "ADDED", "object": pod})
            if bookmarks:
                await _write_line(response, _bookmark(server, initial_events_end=True))
        elif int(version) < server.oldest_version:
            await _write_line(
                response, {"type": "ERROR", "object": k8s.expired(version, server.oldest_version)}
            )
            return response
        else:
            for rv, kind, pod in list(history):
                if (
                    rv > int(version)
                    and pod["metadata"]["namespace"] == namespace
                    and watcher.match(pod)
                ):
                    await _write_line(response, {"type": kind, "object": pod})
        end = anyio.current_time() + timeout
        bookmark_at = end - min(2.0, timeout / 2) if bookmarks else None
        while True:
            wait_until = end if bookmark_at is None else min(end, bookmark_at)
            try:
                item = await asyncio.wait_for(
                    watcher.queue.get(), max(0.0, wait_until - anyio.current_time())
                )
            except TimeoutError:
                if bookmark_at is not None and anyio.current_time() < end:
                    bookmark_at = None
                    await _write_line(response, _bookmark(server))
                    continue
                break
            if item is _CLOSE:
                break
            if item is _ABORT:
                assert request.transport is not None
                request.transport.abort()
                return response
            if isinstance(item, dict):  # an expiry Status
                await _write_line(response, {"type": "ERROR", "object": item})
                break
            rv, kind, pod = item
            if rv > sent:
                await _write_line(response, {"type": kind, "object": pod})
        await response.write_eof()
    finally:
        server._watchers.discard(watcher)
    return response


def _bookmark(server: FakeApiServer, *, initial_events_end: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"resourceVersion": str(server.resource_version)}
    if initial_events_end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {
        "type": "BOOKMARK",
        "object": {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": metadata,
            "spec": {"containers": None},
            "status": {},
        },
    }


async def _logs(
    server: FakeApiServer, request: web.Request, namespace: str, name: str
) -> web.StreamResponse:
    pod = server._get(namespace, name)
    node = server._nodes.get((namespace, name))
    runs = [c["name"] for c in pod["spec"]["containers"]]
    inits = [c["name"] for c in pod["spec"].get("initContainers") or []]
    container = request.query.get("container")
    if container is None:
        if len(runs) != 1:
            extra = f" or one of the init containers: [{' '.join(inits)}]" if inits else ""
            raise k8s.bad_request(
                f"a container name must be specified for pod {name}, "
                f"choose one of: [{' '.join(runs)}]{extra}"
            )
        container = runs[0]
    if container not in runs + inits:
        raise k8s.bad_request(f"container {container} is not valid for pod {name}")
    entry = kubelet.status_entry(pod, container)
    if entry is None or "waiting" in (entry.get("state") or {}):
        raise k8s.bad_request(
            f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'
        )
    follow = _truthy(request.query.get("follow"))
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await response.prepare(request)
    sent = 0
    if "tailLines" in request.query and node is not None:  # start N lines before the end
        sent = max(0, len(node.logs.get(container, [])) - int(request.query["tailLines"]))
    while True:
        changed = node.log_changed if node is not None else None
        lines = node.logs.get(container, []) if node is not None else []
        for line in lines[sent:]:
            await response.write(line.encode() + b"\n")
        sent = len(lines)
        current = server.pods.get((namespace, name))
        entry = kubelet.status_entry(current or {}, container)
        ended = entry is None or "terminated" in (entry.get("state") or {})
        if not follow or changed is None or ended or node is None or node.gone.is_set():
            break
        await changed.wait()
    await response.write_eof()
    return response


async def _exec(
    server: FakeApiServer, request: web.Request, namespace: str, name: str
) -> web.StreamResponse:
    pod = server._get(namespace, name)
    names = [c["name"] for _, c in kubelet.containers(pod)]
    container = request.query.get("container") or pod["spec"]["containers"][0]["name"]
    if container not in names:
        raise k8s.bad_request(f"container {container} is not valid for pod {name}")
    entry = kubelet.status_entry(pod, container)
    if entry is None or "running" not in (entry.get("state") or {}):
        raise k8s.bad_request(f"container {container} is not running")
    command = request.query.getall("command", [])
    socket = web.WebSocketResponse(protocols=("v4.channel.k8s.io",))
    await socket.prepare(request)
    stdout, stderr, code = server.exec_handler(pod, container, list(command))
    if stdout:
        await socket.send_bytes(b"\x01" + stdout.encode())
    if stderr:
        await socket.send_bytes(b"\x02" + stderr.encode())
    status: dict[str, Any] = {"metadata": {}, "status": "Success"}
    if code != 0:
        status = {
            "metadata": {},
            "status": "Failure",
            "message": f"command terminated with non-zero exit code: error executing command "
            f"{command}, exit code {code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
        }
    await socket.send_bytes(b"\x03" + json.dumps(status).encode())
    await socket.close()
    return socket


def _default_exec(pod: dict[str, Any], container: str, command: list[str]) -> tuple[str, str, int]:
    """``echo ARGS`` prints; ``sh -c 'exit N'`` exits N; ``sh -c 'echo X >&2'`` writes stderr."""
    if command[:1] == ["echo"]:
        return " ".join(command[1:]) + "\n", "", 0
    if command[:2] == ["sh", "-c"] and len(command) == 3:
        if m := re.fullmatch(r"exit (\d+)", command[2]):
            return "", "", int(m[1])
        if m := re.fullmatch(r"echo (.*) >&2", command[2]):
            return "", m[1] + "\n", 0
    return "", "", 0


# --- helpers ---------------------------------------------------------------------------------


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("1", "t", "true")


def _manager(request: web.Request) -> str:
    """The field manager a write without ``fieldManager`` gets: the User-Agent's product."""
    return request.headers.get("User-Agent", "unknown").split("/", 1)[0]


def _canned(status: int, request: web.Request, retry_after: int | None = None) -> k8s.APIError:
    """A realistic Status body for an injected failure."""
    match = _POD.fullmatch(request.path)
    namespace = match[1] if match else "default"
    name = (match[2] if match else None) or ""
    if status == 403:
        verb = {"GET": "get", "POST": "create", "DELETE": "delete"}.get(request.method, "patch")
        if not name:
            verb = {"get": "list", "delete": "deletecollection"}.get(verb, verb)
        return k8s.forbidden(verb, name, namespace)
    if status == 404:
        return k8s.not_found(name or "x")
    if status == 405:
        return k8s.method_not_allowed()
    if status == 409:
        return k8s.already_exists(name or "x")
    if status == 410:
        return k8s.APIError(
            k8s.status_body(410, "Expired", "The resourceVersion for the provided list is too old.")
        )
    if status == 429:  # kube-apiserver's priority and fairness filter
        return k8s.APIError(
            k8s.status_body(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
                {"retryAfterSeconds": retry_after or 1},
            )
        )
    if status == 503:
        details = None if retry_after is None else {"retryAfterSeconds": retry_after}
        return k8s.APIError(
            k8s.status_body(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
                details,
            )
        )
    if status == 422:
        return k8s.invalid(
            name or "x",
            [
                {
                    "reason": "FieldValueForbidden",
                    "message": "Forbidden: pod updates may not change fields other than "
                    "`spec.containers[*].image`",
                    "field": "spec",
                }
            ],
        )
    return k8s.APIError(
        k8s.status_body(status, "InternalError", f"Internal error occurred: injected {status}")
    )


_METADATA_ORDER = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "finalizers",
    "managedFields",
]


def _metadata_first(pod: dict[str, Any]) -> dict[str, Any]:
    pod["metadata"] = k8s.ordered(pod["metadata"], _METADATA_ORDER)
    return pod


async def _serve(kubeconfig: Path) -> None:
    """Run the fake until interrupted, with a kubeconfig for it (to try a real-cluster suite)."""
    async with FakeApiServer() as fake:
        fake.kubeconfig(kubeconfig)
        print(f"fake kube-apiserver at {fake.url}; kubeconfig: {kubeconfig}", flush=True)  # noqa: T201
        await anyio.sleep_forever()


if __name__ == "__main__":
    import sys

    anyio.run(_serve, Path(sys.argv[1]))
