"""The public surface: exported names, the error tree, event serialisation."""

from __future__ import annotations

import inspect

import aiodocker
import pytest

from asyncdeploy import _errors as errors
from asyncdeploy._events import (
    ContainerOutcome,
    DrainFinished,
    DrainSummary,
    SignalSent,
    event_to_dict,
)
from asyncdeploy.drivers import DRIVERS, driver_entry
from asyncdeploy.drivers.engine import DockerDriver, PodmanDriver
from asyncdeploy.drivers.engine._address import EngineAddress
from asyncdeploy.drivers.engine._session import EngineSession


def test_every_error_descends_from_the_root() -> None:
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.AsyncDeployError)


def test_registry_names_match_modules() -> None:
    """Each registry key imports a driver class named after it, exported by a public package."""
    for key, entry in DRIVERS.items():
        module, _, class_name = entry.target.partition(":")
        assert entry.name == key
        assert not any(part.startswith("_") for part in module.split("."))
        assert class_name.lower() == f"{key}driver"
        driver_class = entry.load()
        assert driver_class.name == key
        # the registry's options are exactly what connect() takes
        connect = inspect.signature(driver_class.connect).parameters
        assert set(connect) - {"cls"} == entry.options
        assert getattr(driver_class, "host_variable", None) == entry.address_variable
    with pytest.raises(errors.DriverNotFound, match="kuberentes"):
        driver_entry("kuberentes")


def session_of(driver: type[DockerDriver]) -> EngineSession:
    """The session ``driver.connect`` hands its driver (no engine needed to map errors)."""
    unopened = EngineSession(client=None, address=EngineAddress("unix:///nowhere"), engine="")  # type: ignore[arg-type]
    return unopened.variant(driver.name, "1.41")


@pytest.mark.parametrize(
    ("driver", "status", "message", "expected"),
    [
        (DockerDriver, 404, "No such container", errors.WorkloadNotFound),
        (
            DockerDriver,
            409,
            "Conflict. The container name is already in use",
            errors.WorkloadConflict,
        ),
        (DockerDriver, 500, "can only kill running containers", errors.EngineAPIError),
        (DockerDriver, 900, "Cannot connect to Docker Engine", errors.EngineUnavailable),
        (
            PodmanDriver,
            500,
            "can only kill running containers. ... container state improper",
            errors.WorkloadConflict,
        ),
        (PodmanDriver, 500, 'the container name "x" is already in use', errors.WorkloadConflict),
        (
            PodmanDriver,
            500,
            "container x has dependent containers which must be removed before it",
            errors.WorkloadConflict,
        ),
        (
            PodmanDriver,
            500,
            "container 75b7 is a dependency of the following containers: bdae: dependency exists",
            errors.WorkloadConflict,
        ),
        (
            PodmanDriver,
            500,
            'getting container from store "75b7": container not known',
            errors.WorkloadNotFound,
        ),
        (PodmanDriver, 500, "something else broke", errors.EngineAPIError),
    ],
)
def test_engine_errors_are_mapped_at_the_edge(
    driver: type[DockerDriver], status: int, message: str, expected: type[Exception]
) -> None:
    """aiodocker errors become asyncdeploy errors, Podman's 500s read as the conflicts they are."""
    edge = session_of(driver)
    with pytest.raises(expected) as caught, edge.errors("kill x"):
        raise aiodocker.DockerError(status, {"message": message})
    assert type(caught.value) is expected
    assert isinstance(caught.value.__cause__, aiodocker.DockerError)
    assert f"engine={driver.name}" in str(caught.value)


class _ListingClient:
    """aiodocker's containers.list, answering Podman's recorded 500s first (a list that met a
    container another client removed: seen in a CI run of two engine streams)."""

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0
        self.containers = self

    async def list(self, **_: object) -> list[object]:
        self.calls += 1
        if self.calls <= self.failures:
            message = 'getting container from store "75b7": container not known'
            raise aiodocker.DockerError(500, {"message": message})
        return []


@pytest.mark.anyio
async def test_a_list_that_met_a_removal_is_asked_again() -> None:
    edge = session_of(PodmanDriver)
    edge.client = _ListingClient(failures=2)  # type: ignore[assignment]
    assert await edge.containers({}) == []
    assert edge.client.calls == 3  # type: ignore[attr-defined]
    edge.client = _ListingClient(failures=3)  # type: ignore[assignment]
    with pytest.raises(errors.EngineAPIError) as caught:
        await edge.containers({})
    assert type(caught.value) is errors.EngineAPIError  # never "not found": a list misses nothing
    assert "container not known" in str(caught.value)


def test_transport_errors_are_mapped() -> None:
    edge = session_of(DockerDriver)
    with pytest.raises(errors.EngineUnavailable), edge.errors("list"):
        raise ConnectionRefusedError("refused")
    with pytest.raises(errors.EngineTimeout), edge.errors("list"):
        raise TimeoutError


def test_drain_finished_serialises_flat() -> None:
    """The JSON of the summary carries name, role, outcome, exit_code and seconds per container."""
    summary = DrainSummary(
        workload="w",
        grace_period_seconds=5,
        seconds=2.1234,
        containers=(
            ContainerOutcome(name="a", role="run", outcome="exited", exit_code=0, seconds=2.0),
        ),
    )
    data = event_to_dict(DrainFinished(workload="w", elapsed=2.1234, summary=summary))
    assert data["event"] == "DrainFinished"
    assert data["containers"] == [
        {"name": "a", "role": "run", "outcome": "exited", "exit_code": 0, "seconds": 2.0}
    ]
    assert data["totals"]["exited"] == 1
    signal = event_to_dict(SignalSent(workload="w", elapsed=0.01, container="a", signal="SIGTERM"))
    assert signal == {
        "event": "SignalSent",
        "workload": "w",
        "elapsed": 0.01,
        "container": "a",
        "signal": "SIGTERM",
        "role": "run",
        "propagation_seconds": None,
    }


def test_drain_error_lists_every_problem() -> None:
    summary = DrainSummary(
        workload="w", grace_period_seconds=1, seconds=1, containers=(), errors=("remove a: boom",)
    )
    assert "w: remove a: boom" in str(errors.DrainError([summary]))


def test_what_no_engine_said_does_not_pose_as_an_engine_answer() -> None:
    """A workload a list did not hold, a lock another replace holds: neither is an engine
    error, and neither carries a status no engine answered. An engine's own 404 keeps its."""
    missing = errors.WorkloadNotFound("no workload named 'w'", engine="docker")
    held = errors.ReplaceInProgress("a replace of 'w' holds its lock", engine="docker")
    for error in (missing, held):
        assert not isinstance(error, errors.EngineError)
        assert error.status is None and "[" not in str(error)
    answered = errors.WorkloadNotFound("no such container", engine="docker", status=404)
    assert answered.status == 404 and str(answered).startswith("[404] ")
    assert isinstance(missing, LookupError)
