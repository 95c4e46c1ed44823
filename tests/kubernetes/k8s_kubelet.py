"""Checks that only a real kubelet can answer: its Events during a drain, its reasons at start-up.

They run in ``test_real_cluster.py`` (the fake's simulated kubelet records no Events; the
recordings ``08*-kubelet-events-*.json`` replay what a real one recorded, in
``test_kubelet_recordings.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from k8s_contract import Env, collect, name, plan, trap_script

from asyncdeploy import (
    Checks,
    Container,
    ContainerExited,
    ContainerForceKilled,
    CreateError,
    DrainEvent,
    PreStopFinished,
    PreStopStarted,
    Probe,
    Resources,
    SignalSent,
)
from asyncdeploy.drivers.kubernetes import pod_manifest


def _one(events: list[DrainEvent], kind: type[Any]) -> Any:
    [found] = [e for e in events if isinstance(e, kind)]
    return found


def _kinds(events: list[DrainEvent]) -> list[str]:
    return [type(e).__name__ for e in events]


async def _running(env: Env, workload: str, containers: list[Container], grace: int) -> None:
    await env.driver.apply(plan(env, workload, containers, termination_grace_period_seconds=grace))
    await env.driver.wait_ready(workload, timeout=env.ready_timeout)


async def check_a_prestop_hook_runs_before_the_signal(env: Env) -> None:
    """Killing → PreStopStarted at once; the hook (1 s) ends before SIGTERM: PreStopFinished
    (exit 0) and SignalSent come after it, then the exit."""
    workload = name(env, "hook")
    container = Container(
        name=f"{workload}-c",
        image=env.image,
        command=trap_script(0.2, False),
        pre_stop=["sh", "-c", "sleep 1"],
    )
    await _running(env, workload, [container], 10)
    events = await collect(env, [workload], None)
    assert _kinds(events)[:5] == [
        "DrainStarted",
        "PreStopStarted",
        "PreStopFinished",
        "SignalSent",
        "ContainerExited",
    ]
    started, finished = _one(events, PreStopStarted), _one(events, PreStopFinished)
    assert (finished.exit_code, finished.timed_out) == (0, False)
    # the kubelet's Killing Event, not the container's end: a second (the hook) between them
    assert _one(events, SignalSent).elapsed - started.elapsed > 0.9
    exited = _one(events, ContainerExited)
    assert (exited.exit_code, exited.graceful) == (0, True)
    assert events[-1].summary.ok  # type: ignore[union-attr]


async def check_a_failed_prestop_hook_is_reported_then_the_signal_sent(env: Env) -> None:
    """FailedPreStopHook → PreStopFinished (exit code unknown, not timed out), then SIGTERM."""
    workload = name(env, "badhook")
    container = Container(
        name=f"{workload}-c",
        image=env.image,
        command=trap_script(1.0, False),
        pre_stop=["sh", "-c", "exit 3"],
    )
    await _running(env, workload, [container], 10)
    events = await collect(env, [workload], None)
    assert _kinds(events)[1:5] == [
        "PreStopStarted",
        "PreStopFinished",
        "SignalSent",
        "ContainerExited",
    ]
    finished = _one(events, PreStopFinished)
    assert (finished.exit_code, finished.timed_out) == (None, False)
    # read from the Event: the container still drains its 1 s after the signal
    assert _one(events, ContainerExited).elapsed - _one(events, SignalSent).elapsed > 0.8
    assert _one(events, ContainerExited).exit_code == 0


async def check_a_prestop_hook_cut_off_at_the_deadline(env: Env) -> None:
    """A hook longer than the grace period: the kubelet gives up on it at the deadline
    (FailedPreStopHook, timed out), then signals; the container drains and exits."""
    workload = name(env, "longhook")
    container = Container(
        name=f"{workload}-c",
        image=env.image,
        command=trap_script(0.2, False),
        pre_stop=["sh", "-c", "sleep 60"],
    )
    await _running(env, workload, [container], 3)
    events = await collect(env, [workload], None)
    finished = _one(events, PreStopFinished)
    assert (finished.exit_code, finished.timed_out) == (None, True)
    assert finished.elapsed > 2
    assert _kinds(events).index("PreStopFinished") < _kinds(events).index("SignalSent")
    summary = events[-1].summary  # type: ignore[union-attr]
    assert summary.seconds < 60  # cut at the deadline, not held to the hook's end


async def check_the_signal_is_the_kubelets_not_the_containers_end(env: Env) -> None:
    """Without a hook, SignalSent comes from the kubelet's Killing Event: long before the
    container (draining 2 s) ends, and at most a few seconds after the delete."""
    workload = name(env, "signal")
    container = Container(name=f"{workload}-c", image=env.image, command=trap_script(2.0, False))
    await _running(env, workload, [container], 10)
    events = await collect(env, [workload], None)
    signal, exited = _one(events, SignalSent), _one(events, ContainerExited)
    assert exited.elapsed - signal.elapsed > 1.5
    assert not any(isinstance(e, PreStopStarted) for e in events)


async def check_grace_zero_is_a_kill(env: Env) -> None:
    """Grace 0 on a container that would drain 5 s: killed, SIGKILL reason 'grace period 0'."""
    workload = name(env, "zero")
    container = Container(name=f"{workload}-c", image=env.image, command=trap_script(5, False))
    await _running(env, workload, [container], 30)
    events = await collect(env, [workload], 0)
    assert _one(events, ContainerForceKilled).reason == "grace period 0"
    summary = events[-1].summary  # type: ignore[union-attr]
    assert [c.outcome for c in summary.containers] == ["killed"]


# --- start-up failures: at once, with the kubelet's or the scheduler's reason ----------------


async def _fails_fast(env: Env, workload: str, pattern: str, *, within: float = 30) -> CreateError:
    started = anyio.current_time()
    with pytest.raises(CreateError, match=pattern) as caught:
        await env.driver.wait_ready(workload, timeout=90)
    took = anyio.current_time() - started
    assert took < within, f"{took:.1f} s to report {caught.value}"
    await collect(env, [workload], 0)
    return caught.value


async def check_an_image_that_cannot_be_pulled_fails_at_once(env: Env) -> None:
    """A tag nobody has, no registry reachable: ErrImagePull / ImagePullBackOff, naming the
    container, in seconds rather than after the 90 s timeout."""
    workload = name(env, "nopull")
    missing = env.image.rsplit(":", 1)[0] + ":no-such-tag"
    container = Container(name=f"{workload}-c", image=missing, command=["sh"])
    await env.driver.apply(plan(env, workload, [container]))
    await _fails_fast(env, workload, rf"(ErrImagePull|ImagePullBackOff): {container.name} of ")


async def _create_raw(env: Env, workload: str, edit: Callable[[dict[str, Any]], None]) -> None:
    """A Pod the plan cannot say (yet): the driver's manifest, edited, created as is."""
    container = Container(name=f"{workload}-c", image=env.image, command=trap_script(0, False))
    manifest = copy.deepcopy(
        pod_manifest(plan(env, workload, [container]), namespace=env.driver.namespace)
    )
    edit(manifest["spec"]["containers"][0])
    await env.driver.api.create(env.driver.namespace, manifest)


async def check_never_pull_of_an_absent_image_fails_at_once(env: Env) -> None:
    workload = name(env, "never")

    def edit(c: dict[str, Any]) -> None:
        c["image"] = env.image.rsplit(":", 1)[0] + ":absent"
        c["imagePullPolicy"] = "Never"

    await _create_raw(env, workload, edit)
    await _fails_fast(env, workload, rf"ErrImageNeverPull: {workload}-c of .*absent")


async def check_a_missing_config_map_fails_at_once(env: Env) -> None:
    workload = name(env, "config")

    def edit(c: dict[str, Any]) -> None:
        ref = {"configMapKeyRef": {"name": "no-such-config-map", "key": "k"}}
        c["env"] = [{"name": "FROM_MAP", "valueFrom": ref}]

    await _create_raw(env, workload, edit)
    await _fails_fast(
        env, workload, rf"CreateContainerConfigError: {workload}-c of .*no-such-config-map"
    )


async def check_a_crash_loop_fails_at_once(env: Env) -> None:
    """A container that exits 2 under restart 'always': reported with its exit code (the first
    end as 'container exited', or CrashLoopBackOff if the watch sees only the back-off). With a
    readiness probe that it never passes: without one (or with one passing at once) a
    container running for an instant counts as ready."""
    workload = name(env, "crash")
    container = Container(
        name=f"{workload}-c",
        image=env.image,
        command=["sh", "-c", "echo bad config; exit 2"],
        restart_policy="always",
        checks=Checks(readiness=Probe(exec=["test", "-e", "/tmp/ready"], period_seconds=1)),
    )
    await env.driver.apply(plan(env, workload, [container]))
    error = await _fails_fast(
        env, workload, rf"(container exited|CrashLoopBackOff): {container.name}"
    )
    assert error.exit_code == 2
    assert "bad config" in error.logs


async def check_no_node_with_enough_cpu_fails_at_once(env: Env) -> None:
    """64 CPUs on a 2-CPU node: the scheduler's reason, naming the container that asks."""
    workload = name(env, "greedy")
    greedy = Container(
        name=f"{workload}-big",
        image=env.image,
        command=trap_script(0, False),
        resources=Resources(cpu="64"),
    )
    small = Container(name=f"{workload}-small", image=env.image, command=trap_script(0, False))
    await env.driver.apply(plan(env, workload, [greedy, small]))
    await _fails_fast(env, workload, rf"unschedulable: {greedy.name} of .*Insufficient cpu")


KUBELET_CHECKS: list[Callable[[Env], Awaitable[None]]] = [
    check_a_prestop_hook_runs_before_the_signal,
    check_a_failed_prestop_hook_is_reported_then_the_signal_sent,
    check_a_prestop_hook_cut_off_at_the_deadline,
    check_the_signal_is_the_kubelets_not_the_containers_end,
    check_grace_zero_is_a_kill,
    check_an_image_that_cannot_be_pulled_fails_at_once,
    check_never_pull_of_an_absent_image_fails_at_once,
    check_a_missing_config_map_fails_at_once,
    check_a_crash_loop_fails_at_once,
    check_no_node_with_enough_cpu_fails_at_once,
]
