"""Type-checked, never run: what editors and mypy see of open_deployer (tests/unit/test_typing.py)."""

from __future__ import annotations

from typing import assert_type

from asyncdeploy import (
    ApplyResult,
    CreateEvents,
    Deployer,
    Drain,
    DrainEvent,
    DrainSummary,
    Event,
    ReplaceEvent,
    Replacement,
    ReplaceResult,
    WorkloadPlan,
    WorkloadStatus,
    open_deployer,
)


async def uses(plan: WorkloadPlan) -> None:
    async with open_deployer("docker", url="unix:///var/run/docker.sock") as deployer:
        assert_type(deployer, Deployer)
        assert_type(await deployer.create(plan), ApplyResult)
        assert_type(await deployer.get(plan.name), WorkloadStatus)
        assert_type(await deployer.replace(plan), ReplaceResult)
        async with deployer.terminate(plan.name) as drain:  # the handle of one operation
            assert_type(drain, Drain)
            async for event in drain:
                assert_type(event, DrainEvent)
                drain.kill()
        assert_type(drain.summaries, tuple[DrainSummary, ...])
        async with deployer.creating(plan) as creation:
            assert_type(creation, CreateEvents)
            async for created in creation:
                assert_type(created, Event | ReplaceEvent)  # a changed plan: a replace
        assert_type(creation.result, ApplyResult)
        async with deployer.replacing(plan) as replacement:
            assert_type(replacement, Replacement)
            assert_type(replacement.new, WorkloadStatus)
    async with open_deployer("podman") as deployer:
        assert_type(deployer, Deployer)
    async with open_deployer(
        "kubernetes", kubeconfig="~/.kube/config", context="prod", namespace="ml"
    ) as deployer:
        assert_type(deployer, Deployer)
    async with open_deployer() as deployer:  # the first engine that answers
        assert_type(deployer, Deployer)


def every_registered_driver_meets_the_contract() -> None:
    """The registry imports its classes by name; here mypy checks each against ``Driver``."""
    from asyncdeploy.drivers.base import Driver
    from asyncdeploy.drivers.engine import DockerDriver, PodmanDriver
    from asyncdeploy.drivers.kubernetes import KubernetesDriver
    from asyncdeploy.testing import FakeDriver

    conforming: tuple[type[Driver], ...] = (
        DockerDriver,
        PodmanDriver,
        KubernetesDriver,
        FakeDriver,  # asyncdeploy.testing's: users test their control planes on it
    )
    assert conforming
