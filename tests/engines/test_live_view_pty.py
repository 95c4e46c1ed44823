"""The live drain view in a real terminal (a pty read back through pyte): 80 columns hold it.

Each line is cut to the width (never wrapped), the table is drawn once and kept in place, and
where the terminal cannot hold it (narrower than 80, TERM=dumb) the output is one line per event.
"""

from __future__ import annotations

import os
import re

import anyio
import pytest

from asyncdeploy import Container, Deployer
from asyncdeploy.builtin_images import DEMO_IMAGE
from tests.engines.conftest import BUSYBOX, RUN_ID
from tests.engines.helpers import plan
from tests.engines.pty_screen import run_in_pty, screen_of

pytestmark = pytest.mark.anyio

EVENT_LINE = re.compile(r"^\[\s*\d+\.\d{3}s\] ")
DEMO = os.environ.get("ASYNCDEPLOY_TEST_DEMO_IMAGE", DEMO_IMAGE)


async def _workload(deployer: Deployer, suffix: str) -> str:
    """A workload whose rows would not fit in 80 columns unclipped: long names, three containers."""
    name = f"t{RUN_ID}-a-rather-long-workload-name-{suffix}"
    await deployer.create(
        plan(
            name,
            [
                Container(name="setup", role="init", image=BUSYBOX, command=["true"]),
                Container(name="app", image=BUSYBOX, command=["graceful", "app", "1"]),
                Container(
                    name="sidecar-with-a-long-name",
                    image=BUSYBOX,
                    command=["graceful", "sidecar", "1"],
                ),
            ],
            termination_grace_period_seconds=6,
        )
    )
    return name


def _env(term: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return {**env, "TERM": term}


async def _delete_in_pty(
    deployer: Deployer, name: str, *, columns: int, lines: int, term: str = "xterm"
) -> tuple[int, bytes]:
    args = ["--driver", deployer.driver_name, "delete", name]
    return await anyio.to_thread.run_sync(
        lambda: run_in_pty(args, columns=columns, lines=lines, env=_env(term))
    )


async def test_the_live_view_stays_in_place_at_80_columns(deployer: Deployer) -> None:
    """At 80 columns: no line reaches the last column (none wrapped), one table, states shown."""
    name = await _workload(deployer, "live")
    code, output = await _delete_in_pty(deployer, name, columns=80, lines=40)
    screen = screen_of(output, columns=80, lines=40)
    shown = "\n".join(screen)
    assert code == 0, shown
    assert b"\x1b[" in output, "a terminal of 80 columns gets the live view"
    assert max(len(line) for line in screen) < 80, f"a line reached the edge (wrapped):\n{shown}"
    headers = [line for line in screen if line.lstrip().startswith("WORKLOAD")]
    assert len(headers) == 1, f"the table is drawn once, in place:\n{shown}"
    table = screen[screen.index(headers[0]) + 1 :]
    rows = [line for line in table if line.startswith("  ") and "removed" in line]
    assert len(rows) == 4, f"pause, setup, app and the sidecar end as removed:\n{shown}"
    assert all(line.rstrip().endswith("done") for line in rows), shown
    events = [line for line in screen if EVENT_LINE.match(line)]
    assert any("drain finished" in line for line in events), shown
    for line in screen:  # every line is an event, a table row, or the summary on stdout
        assert (
            not line
            or EVENT_LINE.match(line)
            or line.startswith(
                ("  ", f"{name}: drained", "CONTAINER", "pause", "setup", "app", "side")
            )
        ), f"a stray (wrapped) line {line!r}:\n{shown}"


@pytest.mark.parametrize(("columns", "term"), [(79, "xterm"), (120, "dumb")])
async def test_one_line_per_event_where_the_terminal_cannot_hold_the_view(
    deployer: Deployer, columns: int, term: str
) -> None:
    """Narrower than 80 columns or TERM=dumb: plain lines, no cursor movement at all."""
    name = await _workload(deployer, f"plain{columns}")
    code, output = await _delete_in_pty(deployer, name, columns=columns, lines=40, term=term)
    text = output.decode()
    assert code == 0, text
    assert "\x1b[" not in text, "no escape sequence: the one-line-per-event fallback"
    events = [line for line in text.splitlines() if EVENT_LINE.match(line)]
    assert (
        events[0].endswith("3 containers and the pause container")
        and "drain finished" in events[-1]
    ), text


@pytest.mark.parametrize("columns", [80, 100])
async def test_a_signals_notice_stays_above_the_live_table_and_a_cut_hook_says_why(
    deployer: Deployer, columns: int
) -> None:
    """Ctrl-C 1 s into the hook, again at 2.5 s, during a hook that would run 20 s under an 8 s grace: the
    first notice is not erased by the redraw (no second header), and the hook is reported cut
    short at about 2.5 s of 8, not "at the deadline". At 80 columns each notice is folded at
    its words, never cut and never wrapped, and the summary says what was killed."""
    name = f"t{RUN_ID}-notice-{columns}-{deployer.driver_name}"
    await deployer.create(
        plan(
            name,
            [
                Container(
                    name="app",
                    image=BUSYBOX,
                    command=["graceful", "app", "1"],
                    pre_stop=["sleep", "20"],
                )
            ],
            termination_grace_period_seconds=8,
        )
    )
    args = ["--driver", deployer.driver_name, "delete", name]
    code, output = await anyio.to_thread.run_sync(
        lambda: run_in_pty(
            args,
            columns=columns,
            lines=40,
            env=_env("xterm"),
            signals=[(1.0, 2), (2.5, 2)],
            signals_after=b"pre_stop hook started",
        )
    )
    assert code == 130, output.decode(errors="replace")
    screen = screen_of(output, columns=columns, lines=40)
    text = "\n".join(screen)
    assert max(len(line) for line in screen) < columns, f"a line reached the edge:\n{text}"
    words = " ".join(" ".join(screen).split())  # the notices, however folded
    first = (
        "the drain goes on until its deadline; press Ctrl-C again to kill the remaining "
        "containers now"
    )
    assert words.count(first) == 1, text
    assert words.count("killing the remaining containers now, then removing everything") == 1
    assert f"{name}: cut short, killed app at " in text and " of 8 s (done in " in text, text
    headers = [line for line in screen if line.split()[:2] == ["WORKLOAD", "CONTAINER"]]
    assert len(headers) == 1, text
    [cut] = [line for line in screen if "pre_stop hook cut off" in line]
    assert "cut off early, at 2." in cut and "at the deadline" not in cut, text


async def test_an_idle_demo_delete_says_it_waits_for_balancers_and_for_how_long(
    deployer: Deployer,
) -> None:
    """The built-in demo keeps serving for its propagation window after SIGTERM (10 s by
    default; 3 s here): an idle delete waits that long, and the live view says so and counts
    down ("SIGTERM: waiting for balancers to notice, up to 3 s"), the event line too. Without
    it an idle delete sat 10.5 s with nothing saying why."""
    name = f"t{RUN_ID}-idle-demo-{deployer.driver_name}"
    await deployer.create(
        plan(
            name,
            [
                Container(
                    name="server",
                    image=DEMO,
                    command=["python3", "-m", "asyncdeploy.workload.demo"],
                    args=["--propagation-window", "3s"],
                )
            ],
            termination_grace_period_seconds=20,
        )
    )
    await deployer.wait_ready(name, timeout=60)
    code, output = await _delete_in_pty(deployer, name, columns=120, lines=40)
    text = output.decode(errors="replace")
    assert code == 0, text
    assert "server: SIGTERM sent (new requests still served up to 3 s, until balancers notice)" in (
        text
    )
    counted = re.findall(r"SIGTERM: waiting for balancers to notice, up to (\d) s", text)
    assert counted, f"the live view names the window:\n{text}"
    # each second shows for a second (four redraws): a lower one means it counted down
    assert counted[0] == "3" and min(counted) < "3", f"and counts it down: {counted}"
    screen = "\n".join(screen_of(output, columns=120, lines=40))
    assert "waiting for balancers" not in screen, f"gone once the drain ended:\n{screen}"
