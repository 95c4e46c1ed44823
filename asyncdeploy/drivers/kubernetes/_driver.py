"""The Kubernetes driver: one Pod per workload, behind the same contract as Docker and Podman.

Workloads are Pods named after them and labelled ``asyncdeploy.io/workload=<name>``; Pods
without that label are never touched (and read as not found). Every call works in the driver's
namespace; a plan naming another one is refused (:func:`asyncdeploy.namespaces.workload_namespace`:
open the driver in the plan's namespace), so that what ``apply`` creates is where ``get``,
``wait_ready`` and ``delete`` look. A driver opened with ``all_namespaces`` (kubectl's ``-A``)
lists, finds and drains the workloads of every namespace (``list``, ``find_matching``); its
drain's events name them ``namespace/name``; the other calls still work in ``namespace``.

Apply without needless recreation (:func:`._manifest.apply_decision`): the Pod carries
``plan_digest(plan)`` (annotation and label ``asyncdeploy.io/plan-digest``). An equal digest means
unchanged: one GET, no write at all. Any other digest means the plan changed (an image, the grace
period, anything it declares): the old Pod is drained, with its events, then the new one is
created; a failed drain raises ``DrainError`` and creates nothing (the old Pod may still hold its
name). Live fields are never compared with the plan, so server-side defaulting and quantity
spellings cannot cause a recreation.
"""

from __future__ import annotations

import builtins
import math
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from typing import Any, ClassVar

import anyio
import attrs

from asyncdeploy._errors import (
    ENGINE_FAILURES,
    DrainError,
    EngineAPIError,
    EngineUnavailable,
    WorkloadNotFound,
)
from asyncdeploy._events import DrainSummary, Emit, ignore_events
from asyncdeploy._kill import KillSwitch
from asyncdeploy._results import (
    ApplyResult,
    EngineInfo,
    ExecResult,
    WorkloadEvent,
    WorkloadStatus,
)
from asyncdeploy._selectors import Selector, SelectorLike, as_selector
from asyncdeploy.drivers._replaced import drain_replaced
from asyncdeploy.drivers.base import READY_SETTLE_SECONDS, Found
from asyncdeploy.drivers.kubernetes import _status as pod_status
from asyncdeploy.drivers.kubernetes._api import PodAPI
from asyncdeploy.drivers.kubernetes._config import load_cluster_config
from asyncdeploy.drivers.kubernetes._drain import (
    PodsFound,
    PodsFoundEverywhere,
    drain_namespaces,
    drain_pods,
    find_pods,
    find_pods_everywhere,
    remove_unused_services,
)
from asyncdeploy.drivers.kubernetes._errors import ENGINE
from asyncdeploy.drivers.kubernetes._library import ApiClient, api_client
from asyncdeploy.drivers.kubernetes._manifest import apply_decision, pod_manifest
from asyncdeploy.drivers.kubernetes._markers import ConfigMapMarkers
from asyncdeploy.drivers.kubernetes._pod_states import WATCH_MARGIN
from asyncdeploy.drivers.kubernetes._ready import wait_until_ready
from asyncdeploy.drivers.kubernetes._service import apply_service
from asyncdeploy.drivers.parts import NoImages
from asyncdeploy.labels import LABEL_PLAN, LABEL_WORKLOAD
from asyncdeploy.namespaces import workload_namespace
from asyncdeploy.plan import WorkloadPlan, plan_from_record

__all__ = ["KubernetesDriver"]

PING_TIMEOUT = 5.0
SERVICE_CLEANUP_TIMEOUT = 10.0


NO_BUILD = (
    "a cluster does not build images: build them on Docker or Podman (asyncdeploy --driver "
    "docker images build), then load them into the nodes or push them to a registry they reach"
)
NO_INTERACTIVE_EXEC = "exec with stdin or a terminal (-i, -t) is not supported on Kubernetes yet"


class KubernetesDriver(NoImages):
    """Pods through kubernetes-asyncio, with one explicit ``ApiClient``. Images: none seen (the
    node holds them and pulls; the API server cannot see them), none built (``NoImages``)."""

    name: ClassVar[str] = ENGINE
    no_build: ClassVar[str] = NO_BUILD

    def __init__(
        self,
        client: ApiClient,
        *,
        namespace: str,
        request_timeout: float = 30.0,
        watch_margin: float = WATCH_MARGIN,
        all_namespaces: bool = False,
        drain_timeout: float | None = None,
    ) -> None:
        self.api = PodAPI(client, request_timeout=request_timeout)
        self.namespace = namespace
        self.watch_margin = watch_margin
        self.all_namespaces = all_namespaces
        self.drain_timeout = drain_timeout

    # --- Lifecycle (base.Lifecycle) and Markers (base.Markers: ConfigMaps) -----------------------

    @classmethod
    async def connect(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
        request_timeout: float = 30.0,
        all_namespaces: bool = False,
        drain_timeout: float | None = None,
    ) -> KubernetesDriver:
        """Open the cluster the kubeconfig (or the in-cluster account) names, and ping it;
        ``all_namespaces``: list and drain across every namespace (see the module docstring);
        ``drain_timeout``: how long a drain waits for its Pods to be gone, from its start, as
        kubectl's ``delete --timeout`` (default: each Pod's grace period plus its teardown
        margin). A Pod still there then whose containers all ended is reported tearing down
        (``TeardownPending``, the summary's ``tearing_down``), not as a failed drain."""
        found = await load_cluster_config(
            kubeconfig=kubeconfig, context=context, namespace=namespace
        )
        driver = cls(
            api_client(found.configuration),
            namespace=found.namespace,
            request_timeout=request_timeout,
            all_namespaces=all_namespaces,
            drain_timeout=drain_timeout,
        )
        try:
            await driver.ping()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await driver.aclose()
            raise
        return driver

    async def pull(self, plan: WorkloadPlan, *, emit: Emit) -> None:
        """The kubelet pulls, as the Pod's imagePullPolicy says: nothing to do before."""

    async def hold_marker(self, key: str, record: str, *, labels: Mapping[str, str]) -> str | None:
        return await ConfigMapMarkers(self.api, self.namespace).hold(key, record, labels=labels)

    async def read_marker(self, key: str) -> str | None:
        return await ConfigMapMarkers(self.api, self.namespace).read(key)

    async def drop_marker(self, key: str, record: str) -> None:
        await ConfigMapMarkers(self.api, self.namespace).drop(key, record)

    async def marker_keys(self) -> list[str]:
        return await ConfigMapMarkers(self.api, self.namespace).keys()

    async def retire_marker(self, key: str, record: str) -> None:
        await ConfigMapMarkers(self.api, self.namespace).drop(key, record)  # leaves nothing

    async def aclose(self) -> None:
        await self.api.aclose()

    async def ping(self) -> EngineInfo:
        """``GET /version``; ``EngineUnavailable`` when nothing (or nothing usable) answers."""
        host = self.api.client.configuration.host
        try:
            with anyio.fail_after(PING_TIMEOUT):
                version = await self.api.version()
        except TimeoutError as exc:
            raise EngineUnavailable(f"{host} did not answer in time", engine=ENGINE) from exc
        except ENGINE_FAILURES as exc:
            raise EngineUnavailable(
                f"no Kubernetes API server answers at {host}: {exc.message}", engine=ENGINE
            ) from exc
        return EngineInfo(
            driver=ENGINE, version=str(version.get("gitVersion", "")), api_version="v1"
        )

    # --- Looks (base.Looks), the ready wait ------------------------------------------------------

    async def _pod(self, name: str) -> dict[str, Any]:
        """The workload's Pod; ``WorkloadNotFound`` if absent or not asyncdeploy's."""
        pod = await self.api.read(self.namespace, name)
        if LABEL_WORKLOAD not in ((pod.get("metadata") or {}).get("labels") or {}):
            raise WorkloadNotFound(
                f"pod {self.namespace}/{name} is not an asyncdeploy workload",
                engine=ENGINE,
            )
        return pod

    async def get(self, name: str) -> WorkloadStatus:
        return pod_status.workload_status(await self._pod(name))

    async def list(self, selector: SelectorLike | None = None) -> builtins.list[WorkloadStatus]:
        wanted = as_selector(selector)
        label_selector = LABEL_WORKLOAD if wanted is None else f"{LABEL_WORKLOAD},{wanted}"
        if self.all_namespaces:
            found = await self.api.list_pods_everywhere(label_selector=label_selector)
        else:
            found = await self.api.list_pods(self.namespace, label_selector=label_selector)
        statuses = [pod_status.workload_status(p) for p in found.get("items") or []]
        return sorted(statuses, key=lambda s: (s.namespace or "", s.name))

    async def inspect(self, name: str) -> dict[str, Any]:
        pod = await self._pod(name)
        return {
            "workload": name,
            "driver": ENGINE,
            "namespace": self.namespace,
            "pod": pod_status.masked_pod(pod),
        }

    async def recorded_plan(self, name: str) -> WorkloadPlan | None:
        """The plan the Pod was created from (its ``LABEL_PLAN`` annotation)."""
        annotations = ((await self._pod(name)).get("metadata") or {}).get("annotations") or {}
        return plan_from_record(annotations.get(LABEL_PLAN))

    async def recent_events(self, name: str, *, limit: int) -> builtins.list[WorkloadEvent]:
        await self._pod(name)  # WorkloadNotFound first
        listing = await self.api.list_events(
            self.namespace, field_selector=f"involvedObject.kind=Pod,involvedObject.name={name}"
        )
        return pod_status.pod_events(listing, limit=limit)

    async def wait_ready(
        self, name: str, *, timeout: float, settle_seconds: float | None = None
    ) -> WorkloadStatus:
        """The Pod ready, and every run container without a readiness probe settled: still
        running, with no restart, its settle time past its start and the kubelet's report
        delay after that (:mod:`._ready`), or ``CreateError`` with why and its last log lines.
        Its plan's Service then follows it (:meth:`_serve_behind_service`)."""
        settle = READY_SETTLE_SECONDS if settle_seconds is None else settle_seconds
        pod = await wait_until_ready(self.api, self.namespace, name, timeout=timeout, settle=settle)
        await self._serve_behind_service(pod)
        return pod_status.workload_status(pod)

    async def _serve_behind_service(self, pod: Mapping[str, Any]) -> None:
        """A ready Pod's plan decides its Service now: a change that ``apply`` left while an
        older instance served behind it (``_service.py``) is applied."""
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        plan = plan_from_record(annotations.get(LABEL_PLAN))
        if plan is not None and plan.service is not None:
            await apply_service(self.api, plan, self.namespace, wait_for_others=False)

    def logs(
        self,
        name: str,
        *,
        container: str | None = None,
        follow: bool = False,
        tail: int | None = None,
        since: float | None = None,
        timestamps: bool = False,
    ) -> AsyncIterator[str]:
        """The container's log lines (newline kept); ``follow`` streams until it ends."""
        options: dict[str, Any] = {"timestamps": timestamps}
        if tail is not None:
            options["tail_lines"] = tail
        if since is not None:
            options["since_seconds"] = max(1, math.ceil(time.time() - since))
        return self._logs(name, container, follow, options)

    async def _logs(
        self, name: str, container: str | None, follow: bool, options: dict[str, Any]
    ) -> AsyncIterator[str]:
        chosen = self._container(await self._pod(name), container)
        async with self.api.log_lines(
            self.namespace, name, container=chosen, follow=follow, **options
        ) as lines:
            async for line in lines:
                yield line

    async def exec(
        self,
        name: str,
        command: Sequence[str],
        *,
        container: str | None = None,
        on_output: Callable[[str], None] | None = None,
        stdin: AsyncIterable[bytes] | None = None,
        tty: bool = False,
        size: tuple[int, int] | None = None,
    ) -> ExecResult:
        if stdin is not None or tty:
            raise EngineAPIError(
                f"{NO_INTERACTIVE_EXEC}: kubectl exec -it", engine=ENGINE, status=0
            )
        chosen = self._container(await self._pod(name), container)
        exit_code, output = await self.api.exec(
            self.namespace,
            name,
            container=chosen,
            command=builtins.list(command),
            on_output=on_output,
        )
        return ExecResult(exit_code=exit_code, output=output)

    def _container(self, pod: Mapping[str, Any], container: str | None) -> str:
        """``container`` if the Pod has it, else (None) the first run container."""
        specs = builtins.list(pod_status.container_specs(pod))
        if container is None:
            return next(str(spec["name"]) for role, spec in specs if role == "run")
        if any(spec["name"] == container for _, spec in specs):
            return container
        name = pod_status.workload_name(pod)
        have = ", ".join(str(spec["name"]) for _, spec in specs)
        raise WorkloadNotFound(
            f"workload {name!r} has no container {container!r} (it has {have})", engine=ENGINE
        )

    # --- Drains (base.Drains, the primitive: _drain.py) ------------------------------------------

    async def find(self, names: Sequence[str]) -> PodsFound:
        return await find_pods(self.api, self.namespace, names)

    async def find_matching(self, selector: Selector | None) -> PodsFound | PodsFoundEverywhere:
        if self.all_namespaces:
            return await find_pods_everywhere(self.api, selector)
        return await find_pods(self.api, self.namespace, None, selector)

    async def drain(
        self,
        found: Found,
        *,
        grace_period_seconds: int | None,
        emit: Emit,
        keep_volumes: bool = False,
    ) -> builtins.list[DrainSummary]:
        """``keep_volumes``: another instance of the plan follows (a replacement): its Service
        stays, with its ClusterIP (a Pod's own volumes are emptyDirs, or claims it keeps)."""
        if isinstance(found, PodsFoundEverywhere):
            parts, qualified = found.parts, True
        elif isinstance(found, PodsFound):
            parts, qualified = (found,), False
        else:
            raise TypeError(f"{ENGINE} drains only what its own find returned, not {found!r}")
        try:
            return await drain_namespaces(
                self.api,
                parts,
                grace_period_seconds=grace_period_seconds,
                emit=emit,
                margin=self.watch_margin,
                qualified=qualified,
                timeout=self.drain_timeout,
            )
        finally:
            if not keep_volumes:
                with anyio.CancelScope(shield=True), anyio.move_on_after(SERVICE_CLEANUP_TIMEOUT):
                    for part in parts:
                        await remove_unused_services(self.api, part)

    # --- Lifecycle: apply ------------------------------------------------------------------------

    async def apply(
        self,
        plan: WorkloadPlan,
        *,
        emit: Emit | None = None,
        kill: KillSwitch | None = None,
    ) -> ApplyResult:
        """Create; unchanged digest → no write at all; changed → drain (events), then create
        (a failed drain raises ``DrainError`` and creates nothing; a cancellation lets a begun
        drain finish: :func:`~asyncdeploy.drivers._replaced.drain_replaced`)."""
        namespace = workload_namespace(plan.namespace, self.namespace) or self.namespace
        manifest = pod_manifest(plan, namespace=namespace)  # a PlanError before any call
        replaced: DrainSummary | None = None
        existing = await self._existing(plan.name, namespace)
        decision = apply_decision(existing, plan)
        if decision == "unchanged":
            assert existing is not None
            return ApplyResult(action="unchanged", status=pod_status.workload_status(existing))
        if decision == "replace":
            try:
                found = await find_pods(self.api, namespace, [plan.name])
            except WorkloadNotFound:
                decision = "create"  # it went in the meantime
            else:
                # drain_pods, not drain: the plan's Service stays for the Pod created next
                replaced = await drain_replaced(
                    plan.name,
                    lambda watch: drain_pods(
                        self.api,
                        found,
                        grace_period_seconds=None,
                        emit=watch,
                        margin=self.watch_margin,
                        timeout=self.drain_timeout,
                    ),
                    emit or ignore_events,
                    kill,
                )
                if replaced.tearing_down:  # the old Pod still holds the name: no create
                    held = "its Pod was still being torn down, holding the name"
                    raise DrainError([attrs.evolve(replaced, errors=(*replaced.errors, held))])
        created = await self.api.create(namespace, manifest)
        await apply_service(self.api, plan, namespace, wait_for_others=True)
        return ApplyResult(
            action="created" if decision == "create" else "replaced",
            status=pod_status.workload_status(created),
            replaced=replaced,
        )

    async def _existing(self, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            return await self.api.read(namespace, name)
        except WorkloadNotFound:
            return None
