"""The driver contract as checks that run against the fake API server *and* a real cluster.

Each check takes an :class:`Env`: the driver, and containers that drain in a given time or
ignore SIGTERM — a busybox shell trapping TERM, which a real node runs and the fake's simulated
kubelet reads (``fake_kubelet.script_from_command``). The same Pods on both: running the checks
on the fake in CI keeps the real-cluster suite honest between real runs.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs
import pytest

from asyncdeploy import (
    Checks,
    Container,
    ContainerExited,
    ContainerForceKilled,
    CreateError,
    DrainEvent,
    DrainFinished,
    DrainStarted,
    PauseRemoved,
    Probe,
    SignalSent,
    WorkloadNotFound,
    WorkloadPlan,
)
from asyncdeploy.drivers.kubernetes import KubernetesDriver

RUN_LABEL = "asyncdeploy-test-run"


@attrs.define
class Env:
    """Where the checks run: a driver, and an image with ``sh``, ``sleep`` and ``trap``."""

    driver: KubernetesDriver
    image: str
    ready_timeout: float
    run_id: str = attrs.Factory(lambda: secrets.token_hex(3))

    def container(
        self,
        name: str,
        *,
        drain: float = 0.0,
        ignore_term: bool = False,
        ready: bool = False,
        env: dict[str, str] | None = None,
    ) -> Container:
        """A run container that logs ``started``, and on SIGTERM logs ``got TERM`` and exits 0
        after ``drain`` seconds (or never, with ``ignore_term``); ``ready``: with a readiness
        probe. The fake's kubelet reads the same trap from the command."""
        checks = Checks(readiness=Probe(exec=["true"], period_seconds=1)) if ready else Checks()
        return Container(
            name=name,
            image=self.image,
            command=trap_script(drain, ignore_term),
            checks=checks,
            env=env or {},
        )


def trap_script(drain: float, ignore_term: bool) -> list[str]:
    """The busybox shell :meth:`Env.container` runs (the recordings' containers did the same)."""
    on_term = (
        "echo got TERM" if ignore_term else f"echo got TERM; sleep {drain}; echo exiting 0; exit 0"
    )
    return [
        "sh",
        "-c",
        f"trap '{on_term}' TERM; echo started; while true; do sleep 1 & wait $!; done",
    ]


def name(env: Env, short: str) -> str:
    return f"t{env.run_id}-{short}-{secrets.token_hex(2)}"


def plan(env: Env, workload: str, containers: list[Container], **kw: Any) -> WorkloadPlan:
    return WorkloadPlan(name=workload, labels={RUN_LABEL: env.run_id}, containers=containers, **kw)


async def collect(env: Env, names: list[str], grace: int | None) -> list[DrainEvent]:
    events: list[DrainEvent] = []
    await env.driver.drain(
        await env.driver.find(names), grace_period_seconds=grace, emit=events.append
    )
    return events


async def check_create_get_list_and_unchanged_reapply(env: Env) -> None:
    """Create, wait ready, read back; re-applying the same plan leaves the Pod untouched."""
    workload = name(env, "basic")
    wanted = plan(
        env,
        workload,
        [env.container(f"{workload}-c", ready=True)],
        termination_grace_period_seconds=3,
    )
    created = await env.driver.apply(wanted)
    assert created.action == "created"
    status = await env.driver.wait_ready(workload, timeout=env.ready_timeout)
    assert status.state == "running"
    assert status.grace_period_seconds == 3
    assert status.labels == {RUN_LABEL: env.run_id}
    assert status.plan_digest == created.status.plan_digest is not None
    listed = await env.driver.list({RUN_LABEL: env.run_id})
    assert workload in [s.name for s in listed]
    before = (await env.driver.inspect(workload))["pod"]["metadata"]
    again = await env.driver.apply(wanted)
    assert again.action == "unchanged"
    after = (await env.driver.inspect(workload))["pod"]["metadata"]
    for key in ("uid", "creationTimestamp", "generation"):
        assert after[key] == before[key], key
    await collect(env, [workload], 0)


async def check_graceful_drain_emits_every_step(env: Env) -> None:
    """SIGTERM reaches the container, which exits 0; the Pod goes; the summary says so."""
    workload = name(env, "drain")
    container = env.container(f"{workload}-c", drain=0.5)
    await env.driver.apply(plan(env, workload, [container], termination_grace_period_seconds=10))
    await env.driver.wait_ready(workload, timeout=env.ready_timeout)
    lines: list[str] = []
    following = anyio.Event()

    async def follow() -> None:
        async for line in env.driver.logs(workload, follow=True):
            lines.append(line)
            following.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(follow)
        with anyio.fail_after(10):
            await following.wait()
        events = await collect(env, [workload], None)
    assert lines == ["started\n", "got TERM\n", "exiting 0\n"]  # the container saw SIGTERM
    kinds = [type(e) for e in events]
    assert kinds[0] is DrainStarted and kinds[-1] is DrainFinished
    assert kinds.index(SignalSent) < kinds.index(ContainerExited) < kinds.index(PauseRemoved)
    started = events[0]
    assert isinstance(started, DrainStarted) and started.grace_period_seconds == 10
    exited = next(e for e in events if isinstance(e, ContainerExited))
    assert (exited.exit_code, exited.graceful) == (0, True)
    assert not any(isinstance(e, ContainerForceKilled) for e in events)
    summary = events[-1].summary  # type: ignore[union-attr]
    assert summary.ok and summary.count("exited") == 1
    assert summary.seconds > 0.4  # its drain, whole (how long past it: the benchmark's figure)
    try:
        await env.driver.get(workload)
    except WorkloadNotFound:
        pass
    else:
        raise AssertionError("the workload is still there after its drain")


async def check_sigterm_ignored_is_killed_at_the_deadline(env: Env) -> None:
    """A container that ignores SIGTERM is killed (137) when the override grace runs out."""
    workload = name(env, "stubborn")
    container = env.container(f"{workload}-c", ignore_term=True)
    await env.driver.apply(plan(env, workload, [container], termination_grace_period_seconds=30))
    await env.driver.wait_ready(workload, timeout=env.ready_timeout)
    started = anyio.current_time()
    events = await collect(env, [workload], 1)
    elapsed = anyio.current_time() - started
    killed = [e for e in events if isinstance(e, ContainerForceKilled)]
    assert [k.reason for k in killed] == ["deadline"]
    exited = next(e for e in events if isinstance(e, ContainerExited))
    assert (exited.exit_code, exited.graceful) == (137, False)
    summary = events[-1].summary  # type: ignore[union-attr]
    assert summary.grace_period_seconds == 1
    assert [c.outcome for c in summary.containers] == ["killed"]
    # the override (1 s), not the spec's 30 s: killed at the deadline the drain recorded, and
    # before the spec's (a figure the machine's load cannot reach)
    assert 0.8 <= elapsed < 30


async def check_changed_plan_replaces_gracefully(env: Env) -> None:
    """A changed grace period recreates the Pod, draining the old one with its events."""
    workload = name(env, "replace")
    container = env.container(f"{workload}-c", drain=0.2)
    first = await env.driver.apply(
        plan(env, workload, [container], termination_grace_period_seconds=5)
    )
    await env.driver.wait_ready(workload, timeout=env.ready_timeout)
    old_uid = (await env.driver.inspect(workload))["pod"]["metadata"]["uid"]
    events: list[DrainEvent] = []
    second = await env.driver.apply(
        plan(env, workload, [container], termination_grace_period_seconds=7), emit=events.append
    )
    assert second.action == "replaced"
    assert second.replaced is not None and second.replaced.ok
    assert second.status.grace_period_seconds == 7
    assert second.status.plan_digest != first.status.plan_digest
    assert isinstance(events[0], DrainStarted) and isinstance(events[-1], DrainFinished)
    new_uid = (await env.driver.inspect(workload))["pod"]["metadata"]["uid"]
    assert new_uid != old_uid
    await collect(env, [workload], 0)


async def check_logs_exec_and_inspect(env: Env) -> None:
    """Logs from the start, exec with exit codes, inspect with secret-looking values masked."""
    workload = name(env, "tools")
    container = env.container(f"{workload}-c", env={"API_TOKEN": "t0k", "MODEL": "m"})
    await env.driver.apply(plan(env, workload, [container], termination_grace_period_seconds=2))
    await env.driver.wait_ready(workload, timeout=env.ready_timeout)
    lines = [line async for line in env.driver.logs(workload)]
    assert lines[:1] == ["started\n"]
    result = await env.driver.exec(workload, ["echo", "hello"])
    assert (result.exit_code, result.output) == (0, "hello\n")
    failed = await env.driver.exec(workload, ["sh", "-c", "exit 3"])
    assert failed.exit_code == 3
    env_vars = {
        e["name"]: e["value"]
        for e in (await env.driver.inspect(workload))["pod"]["spec"]["containers"][0]["env"]
    }
    assert env_vars == {"API_TOKEN": "****", "MODEL": "m"}
    await collect(env, [workload], 0)


async def check_several_workloads_drain_concurrently(env: Env) -> None:
    """Two workloads under one call: one delete, both drains started before either's first
    signal (one after the other, the first would have signalled before the second started)."""
    names = [name(env, "many-a"), name(env, "many-b")]
    for workload in names:
        container = env.container(f"{workload}-c", drain=0.5)
        await env.driver.apply(
            plan(env, workload, [container], termination_grace_period_seconds=10)
        )
    for workload in names:
        await env.driver.wait_ready(workload, timeout=env.ready_timeout)
    events = await collect(env, names, None)
    finished = [e for e in events if isinstance(e, DrainFinished)]
    assert sorted(e.workload for e in finished) == sorted(names)
    assert all(e.summary.ok for e in finished)
    first_signal = min(i for i, e in enumerate(events) if isinstance(e, SignalSent))
    assert all(isinstance(e, DrainStarted) for e in events[:2]) and first_signal >= 2


DRAIN_EACH = 5.0


async def check_containers_drain_concurrently_under_one_deadline(env: Env) -> None:
    """Three containers needing 5 s each, grace 30: all drain together, their exits within one
    drain's time of each other (one after another, they would be 5 s apart: 5, 10, 15 s).

    The comparison is with the containers' own drain, not a wall-clock figure: a kubelet's sync
    loop on a loaded machine adds a second or more to each, alike; the figure belongs in the
    benchmark."""
    workload = name(env, "three")
    containers = [env.container(f"{workload}-r{i}", drain=DRAIN_EACH) for i in range(3)]
    await env.driver.apply(plan(env, workload, containers, termination_grace_period_seconds=30))
    await env.driver.wait_ready(workload, timeout=env.ready_timeout)
    started = anyio.current_time()
    events = await collect(env, [workload], None)
    elapsed = anyio.current_time() - started
    summary = events[-1].summary  # type: ignore[union-attr]
    assert [(c.outcome, c.exit_code) for c in summary.containers] == [("exited", 0)] * 3
    assert elapsed > DRAIN_EACH - 0.1
    ended = [c.seconds for c in summary.containers if c.seconds is not None]
    assert len(ended) == 3 and max(ended) - min(ended) < DRAIN_EACH, ended


async def check_grace_zero_removes_at_once(env: Env) -> None:
    """Grace 0: the Pod is gone at once and its running containers are killed (no status is
    left to show their end, so no ContainerExited)."""
    workload = name(env, "now")
    container = env.container(f"{workload}-c", drain=5)
    await env.driver.apply(plan(env, workload, [container], termination_grace_period_seconds=30))
    await env.driver.wait_ready(workload, timeout=env.ready_timeout)
    events = await collect(env, [workload], 0)
    summary = events[-1].summary  # type: ignore[union-attr]
    assert summary.ok and summary.grace_period_seconds == 0
    assert [(c.outcome, c.exit_code) for c in summary.containers] == [("killed", None)]
    killed = [e for e in events if isinstance(e, ContainerForceKilled)]
    assert [(k.container, k.reason) for k in killed] == [(container.name, "grace period 0")]
    assert not any(isinstance(e, ContainerExited) for e in events)
    assert isinstance(events[-2], PauseRemoved)


async def check_init_containers_had_already_exited(env: Env) -> None:
    """An init container that ran to completion is reported already-exited, and is no error."""
    workload = name(env, "init")
    init = Container(
        name=f"{workload}-init", image=env.image, role="init", command=["sh", "-c", "exit 0"]
    )
    run = env.container(f"{workload}-c", drain=0.2)
    await env.driver.apply(plan(env, workload, [init, run], termination_grace_period_seconds=5))
    await env.driver.wait_ready(workload, timeout=env.ready_timeout)
    events = await collect(env, [workload], None)
    summary = events[-1].summary  # type: ignore[union-attr]
    assert summary.ok
    assert [(c.role, c.outcome, c.exit_code) for c in summary.containers] == [
        ("init", "already-exited", 0),
        ("run", "exited", 0),
    ]
    assert [e.container for e in events if isinstance(e, SignalSent)] == [run.name]


async def check_a_failing_init_container_fails_wait_ready(env: Env) -> None:
    """The init container's exit code comes back as a CreateError (the Pod stays to inspect)."""
    workload = name(env, "badinit")
    init = Container(
        name=f"{workload}-init", image=env.image, role="init", command=["sh", "-c", "exit 3"]
    )
    run = env.container(f"{workload}-c")
    await env.driver.apply(plan(env, workload, [init, run], termination_grace_period_seconds=5))
    with pytest.raises(CreateError, match=init.name) as caught:
        await env.driver.wait_ready(workload, timeout=env.ready_timeout)
    assert caught.value.exit_code == 3
    await collect(env, [workload], 0)


async def check_a_cancelled_drain_still_removes_the_pod(env: Env) -> None:
    """Cancelling the caller leaves nothing half-done: the cluster finishes the delete."""
    workload = name(env, "cancel")
    container = env.container(f"{workload}-c", drain=1.0)
    await env.driver.apply(plan(env, workload, [container], termination_grace_period_seconds=10))
    await env.driver.wait_ready(workload, timeout=env.ready_timeout)
    events: list[DrainEvent] = []
    with anyio.move_on_after(0.5) as scope:
        found = await env.driver.find([workload])
        await env.driver.drain(found, grace_period_seconds=None, emit=events.append)
    assert scope.cancelled_caught
    assert isinstance(events[0], DrainStarted)
    with anyio.fail_after(15):
        while True:
            try:
                await env.driver.get(workload)
            except WorkloadNotFound:
                break
            await anyio.sleep(0.2)


async def check_a_missing_workload_is_a_clear_not_found(env: Env) -> None:
    missing = name(env, "missing")
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: env.driver.get(missing),
        lambda: env.driver.inspect(missing),
        lambda: env.driver.wait_ready(missing, timeout=5),
        lambda: env.driver.exec(missing, ["true"]),
        lambda: collect(env, [missing], None),
        lambda: _drain_logs(env, missing),
    ]
    for call in calls:
        with pytest.raises(WorkloadNotFound, match=missing):
            await call()


async def _drain_logs(env: Env, workload: str) -> None:
    async for _ in env.driver.logs(workload):
        pass


CHECKS: list[Callable[[Env], Awaitable[None]]] = [
    check_create_get_list_and_unchanged_reapply,
    check_graceful_drain_emits_every_step,
    check_containers_drain_concurrently_under_one_deadline,
    check_sigterm_ignored_is_killed_at_the_deadline,
    check_grace_zero_removes_at_once,
    check_init_containers_had_already_exited,
    check_a_failing_init_container_fails_wait_ready,
    check_changed_plan_replaces_gracefully,
    check_a_cancelled_drain_still_removes_the_pod,
    check_logs_exec_and_inspect,
    check_several_workloads_drain_concurrently,
    check_a_missing_workload_is_a_clear_not_found,
]
