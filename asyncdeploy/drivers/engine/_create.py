"""Creating a container-engine workload, and undoing exactly that when it fails or is cancelled.

Order: volumes, the pause container (it holds the namespaces), each init container to
completion, the run containers started at once, the autoheal sidecar; then a last look that
everything is still there (a delete racing the create would not have seen what came after it).

Every container carries its create call's :data:`LABEL_ATTEMPT`, and each engine create call
runs shielded: a create cancelled in flight still learns the id it made. On any failure or
cancellation the roll-back (shielded, bounded) removes what this call recorded and whatever
carries its attempt label, the pause container last, never another create's containers.
"""

from __future__ import annotations

import builtins
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import aiodocker
import anyio
import attrs

from asyncdeploy.drivers.engine import _spec as spec
from asyncdeploy.drivers.engine._devices import accelerators
from asyncdeploy.drivers.engine._ops import ContainerRef
from asyncdeploy.errors import (
    AsyncDeployError,
    CreateError,
    EngineAPIError,
    EngineError,
    WorkloadConflict,
    WorkloadNotFound,
)
from asyncdeploy.labels import LABEL_ATTEMPT, LABEL_CONTAINER, LABEL_ROLE, LABEL_WORKLOAD
from asyncdeploy.plan import Container, WorkloadPlan

if TYPE_CHECKING:
    from asyncdeploy.drivers.engine._api import EngineAPIDriver

__all__ = ["LABEL_ATTEMPT", "CreateAttempt"]

CREATE_CALL_TIMEOUT = 30.0  # one engine create call, shielded
ROLL_BACK_TIMEOUT = 60.0
# What the engines answer when a device cannot be given, and what a user then needs.
_DEVICE_HINTS = {
    'device driver "nvidia"': "is the NVIDIA container toolkit installed, and Docker "
    "restarted after `nvidia-ctk runtime configure --runtime=docker`?",
    "unresolvable CDI devices": "no CDI specification under /etc/cdi or /var/run/cdi defines "
    "it; for NVIDIA GPUs: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",
}


@attrs.define
class CreateAttempt:
    """One create call of one plan: what it made, so that its roll-back removes exactly that."""

    driver: EngineAPIDriver
    plan: WorkloadPlan
    token: str = attrs.field(factory=lambda: secrets.token_hex(8))
    created: builtins.list[ContainerRef] = attrs.field(factory=list)
    volumes: builtins.list[str] = attrs.field(factory=list)

    async def run(self) -> builtins.list[dict[str, Any]]:
        """Create and start everything; on any failure or cancellation, roll back and re-raise.
        Returns the workload's list entries."""
        plan, driver = self.plan, self.driver
        # Devices the engine cannot give are refused before anything exists.
        spec.refuse_unsupported_devices(plan, engine=driver.name, api_version=driver.api_version)
        try:
            await self._create_volumes()
            pause = await self._create_one("pause", spec.pause_config(plan), "pause")
            await self._start(pause)
            for container in plan.init_containers:
                config = driver._config(plan, container, pause.id)
                ref = await self._create_one(container.name, config, "init")
                await self._run_init(ref, container)
            runs = [
                await self._create_one(
                    container.name, driver._config(plan, container, pause.id), "run"
                )
                for container in plan.run_containers
            ]
            await self._start_all(list(zip(runs, plan.run_containers, strict=True)))
            if plan.autoheal is not None:
                config = spec.autoheal_config(plan, _socket_path(self.driver.url))
                await self._start(await self._create_one("autoheal", config, "autoheal"))
            return await self._check_intact()
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(ROLL_BACK_TIMEOUT):
                await self._roll_back()
            raise

    async def _create_one(self, container: str, config: dict[str, Any], role: Any) -> ContainerRef:
        driver = self.driver
        name = spec.container_name(self.plan.name, container)
        config = {**config, "Labels": {**config["Labels"], LABEL_ATTEMPT: self.token}}
        try:
            # Shielded: a create call cancelled in flight may still make the container, and
            # nothing would know its id. The call answers in well under a second.
            with (
                driver._errors(f"create {name}"),
                anyio.fail_after(CREATE_CALL_TIMEOUT, shield=True),
            ):
                ident = await driver._create_container(config, name)
        except WorkloadConflict as exc:
            raise WorkloadConflict(
                f"{name} exists already: another command is creating workload "
                f"{self.plan.name!r}, or it exists; retry, or delete it first ({exc.message})",
                engine=driver.name,
                status=exc.status,
            ) from exc
        except WorkloadNotFound as exc:
            if "image" not in exc.message.lower():  # e.g. the pause container is gone
                raise CreateError(f"create {name} of {self.plan.name!r}: {exc.message}") from exc
            raise CreateError(  # it was pulled (or present) a moment ago: removed since
                f"image {config['Image']!r} for {name} is not on the {driver.name} engine: "
                f"{exc.message}"
            ) from exc
        ref = ContainerRef(id=ident, name=container, role=role, running=True)
        self.created.append(ref)
        return ref

    async def _start(self, ref: ContainerRef, container: Container | None = None) -> None:
        """Start one container; an engine that refuses (no such command, no such device or
        device driver, ...) is a CreateError naming the container and what it asked for."""
        driver = self.driver
        try:
            with driver._errors(f"start {ref.name}"):
                await driver._client.containers.container(ref.id).start()
        except EngineAPIError as exc:
            if container is not None and container.resources.accelerated:
                hints = [hint for known, hint in _DEVICE_HINTS.items() if known in exc.message]
                raise CreateError(
                    f"the {driver.name} engine cannot give container "
                    f"{spec.container_name(self.plan.name, container.name)} the "
                    f"{accelerators(container)} it asks for: {exc.message}"
                    + "".join(f" ({hint})" for hint in hints)
                ) from exc
            raise CreateError(
                f"container {ref.name} of {self.plan.name!r} did not start: {exc.message}"
            ) from exc

    async def _start_all(self, runs: Sequence[tuple[ContainerRef, Container]]) -> None:
        """Start the run containers at once; their failures come back as one plain error."""
        failures: builtins.list[AsyncDeployError] = []

        async def start(ref: ContainerRef, container: Container) -> None:
            try:
                await self._start(ref, container)
            except AsyncDeployError as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            for ref, container in runs:
                tg.start_soon(start, ref, container)
        if len(failures) == 1:
            raise failures[0]
        if failures:
            raise CreateError("; ".join(str(f) for f in failures))

    async def _run_init(self, ref: ContainerRef, container: Container) -> None:
        """Init containers run one after another, each to completion, before any run container."""
        await self._start(ref, container)
        exit_code = await self.driver.wait_exit(ref)
        if exit_code != 0:
            logs = ""
            with self.driver._errors(f"logs of {ref.name}"):
                handle = self.driver._client.containers.container(ref.id)
                logs = "".join(await handle.log(stdout=True, stderr=True))
            raise CreateError(
                f"init container {ref.name} of {self.plan.name!r} failed",
                exit_code=exit_code,
                logs=logs,
            )

    async def _check_intact(self) -> builtins.list[dict[str, Any]]:
        """Everything this create made is still there: a delete racing it did not take part of
        it away (that delete would not have seen the containers made after it looked)."""
        items = await self.driver._containers({LABEL_WORKLOAD: self.plan.name})
        present = {str(item["Id"]) for item in items}
        lost = [ref.name for ref in self.created if ref.id not in present]
        if lost:
            raise WorkloadConflict(
                f"workload {self.plan.name!r} was deleted by another command while it was "
                f"being created ({', '.join(lost)} gone)",
                engine=self.driver.name,
                status=409,
            )
        return items

    async def _create_volumes(self) -> None:
        driver, plan = self.driver, self.plan
        names = {m.source for c in plan.containers for m in c.mounts if m.type == "volume"}
        for volume in sorted(n for n in names if n):
            try:
                with driver._errors(f"inspect volume {volume}"):
                    await driver._client.volumes.get(spec.path_segment(volume))  # type: ignore[no-untyped-call]
                continue  # it existed before: it is not the workload's to remove
            except WorkloadNotFound:
                pass
            with driver._errors(f"create volume {volume}"):
                await driver._client.volumes.create(  # type: ignore[no-untyped-call]
                    {"Name": volume, "Labels": {LABEL_WORKLOAD: plan.name}}
                )
            self.volumes.append(volume)

    async def _roll_back(self) -> None:
        """Remove the containers this create recorded and any carrying its attempt label (one
        whose create call was cut off), the pause container last; then its volumes."""
        driver = self.driver
        refs = {ref.id: ref for ref in self.created}
        try:
            found = await driver._containers(
                {LABEL_WORKLOAD: self.plan.name, LABEL_ATTEMPT: self.token}
            )
        except EngineError:
            found = []
        for item in found:
            labels = item["Labels"]
            refs.setdefault(
                str(item["Id"]),
                ContainerRef(
                    id=str(item["Id"]),
                    name=labels.get(LABEL_CONTAINER, ""),
                    role=labels.get(LABEL_ROLE, "run"),
                    running=True,
                ),
            )
        for ref in sorted(refs.values(), key=lambda r: r.role == "pause"):
            try:
                await driver.signal(ref, "SIGKILL")
                await driver.remove(ref)
            except EngineError:
                pass  # gone already, or best effort: the original error is what the caller needs
        for volume in self.volumes:
            try:
                with driver._errors(f"remove volume {volume}"):
                    segment = spec.path_segment(volume)
                    handle = aiodocker.volumes.DockerVolume(driver._client, segment)  # type: ignore[no-untyped-call]
                    await handle.delete()  # type: ignore[no-untyped-call]
            except EngineError:
                pass


def _socket_path(url: str) -> str:
    if not url.startswith("unix://"):
        raise CreateError(f"an autoheal sidecar needs a local engine socket, not {url}")
    return url.removeprefix("unix://")
