"""``verify --report report.html``: one self-contained page, rendered in headless Chromium
(Debian's package) and read back element by element."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import anyio
import attrs
import pytest

from asyncdeploy import Deployer
from asyncdeploy._events import (
    ContainerExited,
    ContainerOutcome,
    DrainFinished,
    DrainStarted,
    DrainSummary,
    PauseRemoved,
    PreStopStarted,
    SignalSent,
)
from asyncdeploy.verify import DEMO_IMAGE, ServerState, VerifyReport, demo_plan
from asyncdeploy.verify.html import report_html
from asyncdeploy.verify.traffic import RequestRecord
from tests.cli_runner import invoke_in_thread
from tests.engines.conftest import PAUSE, RUN_ID, RUN_LABEL, required_engines

pytestmark = pytest.mark.anyio

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        if required_engines():
            pytest.fail("chromium is required with the engines (apt-get install chromium)")
        pytest.skip("chromium is not installed")
    return found


class _Elements(HTMLParser):
    """Every element with its attributes, and the text inside #summary cells."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.cells: dict[tuple[str, str], int] = {}
        self.texts: dict[tuple[str, str], str] = {}
        self._row: str | None = None
        self._cell: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        got = {k: v or "" for k, v in attrs}
        self.elements.append((tag, got))
        if tag == "tr" and "data-kind" in got:
            self._row = got["data-kind"]
        if tag == "td" and "data-outcome" in got:
            self._cell = got["data-outcome"]

    def handle_data(self, data: str) -> None:
        if self._row is not None and self._cell is not None and data.strip():
            self.texts[(self._row, self._cell)] = data.strip()
            if data.strip().isdigit():
                self.cells[(self._row, self._cell)] = int(data)
            self._cell = None

    def having(self, tag: str, cls: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and cls in a.get("class", "").split()]


async def rendered(page: Path) -> _Elements:
    """The DOM after Chromium loaded the page (file://, no network, a fresh profile)."""
    profile = tempfile.mkdtemp(prefix="asyncdeploy-chromium-")
    try:
        with anyio.fail_after(90):
            done = await anyio.run_process(
                [
                    _chromium(),
                    *CHROMIUM_FLAGS,
                    f"--user-data-dir={profile}",
                    "--dump-dom",
                    f"file://{page}",  # tmp_path: absolute
                ],
                check=False,
            )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    parser = _Elements()
    parser.feed(done.stdout.decode())
    return parser


def _report() -> VerifyReport:
    t = 1_800_000_000.0
    records = (
        RequestRecord(id="r1", kind="short", started=t, ended=t + 0.1, instance="a", outcome="completed"),
        RequestRecord(id="r2", kind="stream", started=t + 0.5, ended=t + 3, instance="a", outcome="completed"),
        RequestRecord(id="r3", kind="short", started=t + 1.1, ended=t + 1.2, instance="a", outcome="refused"),
        RequestRecord(id="r4", kind="short", started=t + 1.2, ended=t + 1.3, instance="b", outcome="completed"),
        RequestRecord(id="r5", kind="stream", started=t + 0.9, ended=t + 2.5, instance="b", outcome="truncated"),
    )  # fmt: skip
    summary = DrainSummary(
        workload="a",
        grace_period_seconds=10,
        seconds=2.5,
        containers=(
            ContainerOutcome(name="server", role="run", outcome="exited", exit_code=0, seconds=2.4),
        ),
    )
    events = (
        DrainStarted(workload="a", elapsed=0.0, grace_period_seconds=10, deadline=t + 11, containers=("server",)),
        PreStopStarted(workload="a", elapsed=0.01, container="server"),
        SignalSent(workload="a", elapsed=1.5, container="server", signal="SIGTERM"),
        ContainerExited(workload="a", elapsed=2.4, container="server", exit_code=0, graceful=True),
        PauseRemoved(workload="a", elapsed=2.5, container="pause"),
        DrainFinished(workload="a", elapsed=2.5, summary=summary),
    )  # fmt: skip
    return VerifyReport(
        driver="docker",
        mode="delete",
        records=records,
        events=events,
        drain_started_at=t + 1,
        request_names=("short", "stream"),
        balancer="haproxy",
        balancer_states=(ServerState(at=t + 1.6, server="a", status="DOWN"),),
    )


async def test_the_page_draws_every_request_and_every_step(tmp_path: Path) -> None:
    """Each request is one bar with its outcome and instance; each drain step one moment; the
    summary table holds the counts; the verdict says FAIL (a refusal and a cut stream)."""
    page = tmp_path / "report.html"
    page.write_text(report_html(_report()))
    dom = await rendered(page)
    bars = dom.having("rect", "request")
    assert {(b["data-id"], b["data-outcome"], b["data-instance"]) for b in bars} == {
        ("r1", "completed", "a"),
        ("r2", "completed", "a"),
        ("r3", "refused", "a"),
        ("r4", "completed", "b"),
        ("r5", "truncated", "b"),
    }
    fills = {b["data-outcome"]: b["fill"] for b in bars}
    assert len(set(fills.values())) == 3, "one colour per outcome"
    edges = {b["data-instance"]: b["stroke"] for b in bars}
    assert edges["a"] != edges["b"], "one colour per instance"
    steps = [m["data-step"] for m in dom.having("g", "moment")]
    for step in ("drain-started", "pre-stop", "signal", "traffic-left", "exited", "pause-removed"):
        assert step in steps
    assert steps.index("drain-started") < steps.index("traffic-left") < steps.index("exited")
    assert dom.cells[("short", "completed")] == 2 and dom.cells[("short", "refused")] == 1
    assert dom.cells[("stream", "truncated")] == 1
    [verdict] = [a for t, a in dom.elements if a.get("id") == "verdict"]
    assert verdict["data-passed"] == "false"
    text = page.read_text()
    assert "<script" not in text and "http://" not in text.replace("http://www.w3.org", "")


async def test_verify_writes_the_page_of_a_real_run(tmp_path: Path) -> None:
    """``asyncdeploy verify --report x.html`` on Docker through HAProxy: the page holds as many
    bars as the run sent requests, and the drain's steps."""
    if not os.environ.get("DOCKER_HOST") and "docker" not in required_engines():
        pytest.skip("no Docker")
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed")
    image = os.environ.get("ASYNCDEPLOY_TEST_DEMO_IMAGE", "localhost/asyncdeploy/demo:latest")
    page = tmp_path / "report.html"
    result = await invoke_in_thread(
        "--driver", "docker", "verify", "--balancer", "haproxy", "--image", image,
        "--pause-image", PAUSE, "--warmup", "2s", "--grace-period-seconds", "15",
        "--short-rate", "10", "--report", str(page), "-o", "json",
    )  # fmt: skip
    assert result.exit_code in (0, 1), result.output  # the kit decides which
    report = json.loads(result.stdout)
    dom = await rendered(page)
    assert len(dom.having("rect", "request")) == len(report["requests"]) > 10
    steps = {m["data-step"] for m in dom.having("g", "moment")}
    assert {"drain-started", "signal", "exited", "traffic-left", "drain-finished"} <= steps


async def test_delete_writes_the_timeline_of_its_drain(deployer: Deployer, tmp_path: Path) -> None:
    """``asyncdeploy delete NAME --timeline x.html``: a bar per container, the drain's steps
    in their order, the summary table, read back from Chromium."""
    image = os.environ.get("ASYNCDEPLOY_TEST_DEMO_IMAGE", DEMO_IMAGE)
    plan = demo_plan(f"t{RUN_ID}-tl-{deployer.driver_name[:3]}", image=image, pause_image=PAUSE)
    plan = attrs.evolve(plan, labels={RUN_LABEL: RUN_ID}, termination_grace_period_seconds=15)
    await deployer.create(plan)
    await deployer.wait_ready(plan.name, timeout=90)
    page = tmp_path / "drain.html"
    result = await invoke_in_thread(
        "--driver", deployer.driver_name, "delete", plan.name, "--timeline", str(page)
    )
    assert result.exit_code == 0, result.output
    dom = await rendered(page)
    bars = {b["data-id"]: b["data-outcome"] for b in dom.having("rect", "request")}
    assert bars.get("server") == "exited", bars
    steps = [m["data-step"] for m in dom.having("g", "moment")]
    for step in ("drain-started", "pre-stop", "signal", "exited", "pause-removed"):
        assert step in steps, steps
    assert steps.index("drain-started") < steps.index("signal") < steps.index("pause-removed")
    assert dom.texts[(f"{plan.name}/server", "exited")] == "exited"
    [verdict] = [a for t, a in dom.elements if a.get("id") == "verdict"]
    assert verdict["data-passed"] == "true"
