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
import collections
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, ClassVar

import anyio
from kubernetes_asyncio.client import ApiClient

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
from asyncdeploy.drivers.kubernetes._kubelet import StartupFailure, startup_failure
from asyncdeploy.drivers.kubernetes._manifest import apply_decision, pod_manifest
from asyncdeploy.drivers.kubernetes._markers import ConfigMapMarkers
from asyncdeploy.drivers.kubernetes._pod_states import WATCH_MARGIN
from asyncdeploy.drivers.kubernetes._service import apply_service
from asyncdeploy.drivers.kubernetes._watch import PodEvent, PodFollower, Resync
from asyncdeploy.errors import (
    CreateError,
    EngineError,
    EngineTimeout,
    EngineUnavailable,
    WorkloadNotFound,
)
from asyncdeploy.events import DrainSummary, Emit, ignore_events
from asyncdeploy.labels import LABEL_PLAN, LABEL_WORKLOAD
from asyncdeploy.namespaces import workload_namespace
from asyncdeploy.plan import WorkloadPlan, plan_from_record
from asyncdeploy.results import (
    ApplyResult,
    EngineInfo,
    ExecResult,
    WorkloadEvent,
    WorkloadStatus,
)
from asyncdeploy.selectors import Selector, SelectorLike, as_selector

__all__ = ["KubernetesDriver"]

PING_TIMEOUT = 5.0
SERVICE_CLEANUP_TIMEOUT = 10.0


class KubernetesDriver:
    """Pods through kubernetes-asyncio, with one explicit ``ApiClient``."""

    name: ClassVar[str] = ENGINE

    def __init__(
        self,
        client: ApiClient,
        *,
        namespace: str,
        request_timeout: float = 30.0,
        watch_margin: float = WATCH_MARGIN,
        all_namespaces: bool = False,
    ) -> None:
        self.api = PodAPI(client, request_timeout=request_timeout)
        self.namespace = namespace
        self.watch_margin = watch_margin
        self.all_namespaces = all_namespaces

    # --- life cycle --------------------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
        request_timeout: float = 30.0,
        all_namespaces: bool = False,
    ) -> KubernetesDriver:
        """Open the cluster the kubeconfig (or the in-cluster account) names, and ping it;
        ``all_namespaces``: list and drain across every namespace (see the module docstring)."""
        found = await load_cluster_config(
            kubeconfig=kubeconfig, context=context, namespace=namespace
        )
        driver = cls(
            ApiClient(found.configuration),
            namespace=found.namespace,
            request_timeout=request_timeout,
            all_namespaces=all_namespaces,
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
        except EngineError as exc:
            raise EngineUnavailable(
                f"no Kubernetes API server answers at {host}: {exc.message}", engine=ENGINE
            ) from exc
        return EngineInfo(
            driver=ENGINE, version=str(version.get("gitVersion", "")), api_version="v1"
        )

    # --- reading state -----------------------------------------------------------------------

    async def _pod(self, name: str) -> dict[str, Any]:
        """The workload's Pod; ``WorkloadNotFound`` if absent or not asyncdeploy's."""
        pod = await self.api.read(self.namespace, name)
        if LABEL_WORKLOAD not in ((pod.get("metadata") or {}).get("labels") or {}):
            raise WorkloadNotFound(
                f"pod {self.namespace}/{name} is not an asyncdeploy workload",
                engine=ENGINE,
                status=404,
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

    async def image_ports(self, image: str) -> frozenset[int] | None:
        return None  # the node pulls; the API server cannot see images

    async def wait_ready(self, name: str, *, timeout: float) -> WorkloadStatus:
        """The Pod ready (:meth:`_until_ready`), and every run container without a readiness
        probe still running, with no restart, :data:`READY_SETTLE_SECONDS` after it was seen
        running (a Pod without probes is Ready the moment its containers start): the same rule
        as on Docker and Podman. A container that ends or restarts in that time fails the wait
        with its exit code and last log lines.
        """
        deadline = anyio.current_time() + timeout
        seen: dict[str, tuple[float, int]] = {}  # unchecked container -> (first seen, restarts)
        while True:
            try:
                left = max(0.0, deadline - anyio.current_time())
                pod = await self._until_ready(name, timeout=left)
            except EngineTimeout:
                raise EngineTimeout(
                    f"workload {name!r} was not ready within {timeout:g} s", engine=ENGINE
                ) from None
            now = anyio.current_time()
            statuses = pod_status.container_statuses(pod)
            unchecked = [
                spec["name"]
                for role, spec in pod_status.container_specs(pod)
                if role == "run" and not spec.get("readinessProbe")
            ]
            for container in unchecked:
                restarts = int((statuses.get(container) or {}).get("restartCount") or 0)
                if container in seen and seen[container][1] != restarts:
                    raise await self._startup_error(name, _restarted(pod, container))
                seen.setdefault(container, (now, restarts))
            settle = max((seen[c][0] + READY_SETTLE_SECONDS - now for c in unchecked), default=0)
            if settle <= 0:
                await self._serve_behind_service(pod)
                return pod_status.workload_status(pod)
            if now + settle > deadline:
                raise EngineTimeout(
                    f"workload {name!r} was not ready within {timeout:g} s", engine=ENGINE
                )
            await anyio.sleep(settle)

    async def _serve_behind_service(self, pod: Mapping[str, Any]) -> None:
        """A ready Pod's plan decides its Service now: a change that ``apply`` left while an
        older instance served behind it (``_service.py``) is applied."""
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        plan = plan_from_record(annotations.get(LABEL_PLAN))
        if plan is not None and plan.service is not None:
            await apply_service(self.api, plan, self.namespace, wait_for_others=False)

    async def _until_ready(self, name: str, *, timeout: float) -> dict[str, Any]:
        """Watch the Pod until its ``Ready`` condition is True; the Pod then.

        ``CreateError`` at once, naming the container, when the Pod will not start
        (:func:`._kubelet.startup_failure`): no node can take it ("Insufficient cpu"), an image
        cannot be pulled (``ErrImagePull``, ``ImagePullBackOff``, ``ErrImageNeverPull``), the
        container cannot be created (``CreateContainerConfigError``), it crash-loops, an init
        container fails, a run container ends, or the Pod fails or is deleted meanwhile (with the
        exit code and the container's last log lines when it ran) — the Pod is left for
        inspection; ``WorkloadNotFound`` when it is (or goes) missing;
        ``EngineTimeout`` after ``timeout``.
        """
        ready: list[dict[str, Any]] = []
        failed: list[StartupFailure] = []

        def check(pod: Mapping[str, Any]) -> bool:
            if (pod.get("metadata") or {}).get("deletionTimestamp"):
                raise CreateError(f"pod {name} is being deleted; it will not become ready")
            if (failure := startup_failure(pod)) is not None:
                failed.append(failure)
                return True
            if pod_status.pod_ready(pod):
                ready.append(dict(pod))
                return True
            return False

        def handle(event: PodEvent) -> bool:
            if isinstance(event, Resync):
                if not event.pods:
                    raise WorkloadNotFound(
                        f"no workload named {name!r} in namespace {self.namespace}",
                        engine=ENGINE,
                        status=404,
                    )
                return check(event.pods[0])
            if event.type == "DELETED":
                raise WorkloadNotFound(f"pod {name} was deleted", engine=ENGINE, status=404)
            return check(event.pod)

        follower = PodFollower(
            self.api,
            self.namespace,
            label_selector=LABEL_WORKLOAD,
            field_selector=f"metadata.name={name}",
        )
        deadline = anyio.current_time() + timeout
        try:
            with anyio.fail_after(timeout):
                await follower.run(handle, poll=lambda: deadline - anyio.current_time())
                if failed:
                    raise await self._startup_error(name, failed[0])
        except TimeoutError:
            raise EngineTimeout(
                f"workload {name!r} was not ready within {timeout:g} s", engine=ENGINE
            ) from None
        return ready[-1]

    async def _startup_error(self, name: str, failure: StartupFailure) -> CreateError:
        """The error for a Pod that will not start: the kubelet's or the scheduler's reason and
        message, and the end of the container's log when it ran."""
        where = f"{failure.container} of {name!r}" if failure.container else repr(name)
        message = f"{failure.what}: {where}"
        if failure.message:
            message += f": {failure.message}"
        if failure.exit_code is None and failure.what != "container exited":
            return CreateError(message, exit_code=failure.exit_code)  # it never ran: no logs
        lines: collections.deque[str] = collections.deque(maxlen=20)
        try:
            async with self.api.log_lines(
                self.namespace, name, container=failure.container, follow=False
            ) as stream:
                async for line in stream:
                    lines.append(line)
        except EngineError:
            pass  # best effort: the error is about the exit, not the logs
        return CreateError(message, exit_code=failure.exit_code, logs="".join(lines))

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
    ) -> ExecResult:
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
        raise WorkloadNotFound(
            f"workload {name!r} has no container {container!r}", engine=ENGINE, status=404
        )

    # --- drain -------------------------------------------------------------------------------

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
            )
        finally:
            if not keep_volumes:
                with anyio.CancelScope(shield=True), anyio.move_on_after(SERVICE_CLEANUP_TIMEOUT):
                    for part in parts:
                        await remove_unused_services(self.api, part)

    # --- apply -------------------------------------------------------------------------------

    async def apply(
        self,
        plan: WorkloadPlan,
        *,
        emit: Emit | None = None,
        kill_now: anyio.Event | None = None,
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
                    ),
                    emit or ignore_events,
                    kill_now,
                )
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


def _restarted(pod: Mapping[str, Any], container: str) -> StartupFailure:
    """A run container that ended and was restarted while the wait settled: its last exit."""
    entry = pod_status.container_statuses(pod).get(container) or {}
    last = pod_status.terminated({"state": entry.get("lastState")}) or {}
    code = last.get("exitCode")
    return StartupFailure(
        "container exited", container, None if code is None else int(code), reason="Restarted"
    )
