"""Property-based fuzzing of the command line: bad arguments and files are exit 2 with a message.

Never a traceback: ``result.exception`` is only ever the ``SystemExit`` click ends with, and no
engine is opened for input that is refused (``open_deployer`` is replaced by one that records
the call and answers "unreachable", exit 3).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncdeploy._errors import EngineUnavailable, PlanError, SelectorError
from asyncdeploy._selectors import parse_selector
from asyncdeploy.durations import parse_duration
from asyncdeploy.plan import WorkloadPlan
from tests.cli_runner import invoke
from tests.unit.test_plan_fuzz import documents, mutated_plans

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Engines:
    """Stands in for ``open_deployer``: counts the calls, and no engine ever answers."""

    def __init__(self) -> None:
        self.opened = 0

    @contextlib.asynccontextmanager
    async def open(self, driver: str | None = None, **_: Any) -> AsyncIterator[Any]:
        self.opened += 1
        raise EngineUnavailable("no engine in unit tests", engine=str(driver))
        yield  # pragma: no cover


@contextlib.contextmanager
def no_engine() -> Iterator[Engines]:
    engines = Engines()
    with mock.patch("asyncdeploy._opening.open_deployer", engines.open):
        yield engines  # every command opens its deployer through Settings.open_deployer


def plan_file(text: str) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False, encoding="utf-8") as handle:
        handle.write(text)
    return handle.name


def verdict(path: str) -> bool:
    """Whether the library takes this plan file."""
    try:
        WorkloadPlan.from_file(path)
    except PlanError:
        return False
    return True


any_text = st.text(max_size=40) | st.text("0123456789.eE+-msh xyz", max_size=12)


@FUZZ
@given(documents | mutated_plans())
def test_create_refuses_bad_plans_before_any_engine(document: Any) -> None:
    path = plan_file(yaml.safe_dump(document))
    try:
        with no_engine() as engines:
            result = invoke("create", "-f", path)
        if verdict(path):
            assert (result.exit_code, engines.opened) == (3, 1)
        else:
            assert (result.exit_code, engines.opened) == (2, 0), result.output
            assert result.output.startswith("Error: ")
    finally:
        Path(path).unlink()


@FUZZ
@given(any_text)
def test_create_and_lint_refuse_damaged_text(text: str) -> None:
    path = plan_file(text)
    try:
        with no_engine() as engines:
            created = invoke("create", "-f", path)
            linted = invoke("lint", path)
        if not verdict(path):
            assert (created.exit_code, linted.exit_code, engines.opened) == (2, 2, 0)
    finally:
        Path(path).unlink()


@FUZZ
@given(any_text, st.sampled_from(["list", "delete-all"]))
def test_selectors_are_refused_before_any_engine(selector: str, command: str) -> None:
    with no_engine() as engines:
        result = invoke(command, "--selector", selector)
    try:
        parse_selector(selector)
    except SelectorError:
        assert (result.exit_code, engines.opened) == (2, 0)
        assert "Invalid value for '--selector'" in result.output
    else:
        assert (result.exit_code, engines.opened) == (3, 1)


@FUZZ
@given(any_text, st.sampled_from(["--warmup", "--margin", "--expected-drain", "--timeout"]))
def test_durations_are_refused_before_any_engine(text: str, option: str) -> None:
    lint_plan = plan_file("name: a\ncontainers: [{name: x, image: i}]\n")
    commands = {
        "--warmup": ["verify", "--warmup", text],
        "--margin": ["lint", lint_plan, "--margin", text],
        "--expected-drain": ["lint", lint_plan, "--expected-drain", text],
        "--timeout": ["drain", "--socket", "/nonexistent/x.sock", "--timeout", text],
    }
    try:
        with no_engine():
            result = invoke(*commands[option])
    finally:
        Path(lint_plan).unlink()
    try:
        valid = 0 <= parse_duration(text) <= 86_400
    except ValueError:
        valid = False
    if not valid:
        assert result.exit_code == 2, result.output
        assert f"Invalid value for '{option}'" in result.output


NOT_NUMBERS = ["nan", "NaN", "inf", "-inf", "-1", "1e400", "x", ""]  # refused by every option


@FUZZ
@given(
    st.sampled_from(
        [
            *("--short-rate", "--long-rate", "--long-seconds", "--stream-pace"),
            *("--stream-tokens", "--port", "--client-abort-every", "--grace-period-seconds"),
        ]
    ),
    st.sampled_from(NOT_NUMBERS) | any_text,
)
def test_numbers_are_checked_before_any_engine(option: str, text: str) -> None:
    with no_engine() as engines:
        result = invoke("verify", option, text)
    assert result.exit_code in (2, 3), result.output
    if text in NOT_NUMBERS:
        assert result.exit_code == 2, result.output
    if result.exit_code == 2:
        assert engines.opened == 0 and f"'{option}'" in result.output


@FUZZ
@given(
    st.sampled_from(["get", "delete", "logs", "inspect"]),
    st.sampled_from(["a,b", "x) ,y in (z", "A", "-a", "a_b", "", "a" * 64]) | any_text,
)
def test_workload_names_are_checked_before_any_engine(command: str, name: str) -> None:
    """A name no plan can have never reaches an engine filter or a Kubernetes selector."""
    with no_engine() as engines:
        result = invoke(command, "--", name)
    try:
        WorkloadPlan.from_mapping({"name": name, "containers": [{"name": "c", "image": "i"}]})
    except PlanError:
        assert (result.exit_code, engines.opened) == (2, 0), result.output
        assert "Invalid value for 'NAME'" in result.output
    else:
        assert (result.exit_code, engines.opened) == (3, 1)
