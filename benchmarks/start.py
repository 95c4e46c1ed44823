"""The CLI's start: a command that answers at once, beside the engine's own CLI.

    python benchmarks/start.py [--runs 9] [--engines docker,podman] [--compare-source DIR]

(``nox -s bench`` runs it; the Kubernetes rows are in ``benchmarks/kube.py``.) Fresh processes,
interleaved round by round so that drift hits every row alike, one at a time:

* **asyncdeploy --driver docker list** beside **docker ps** (and Podman's pair): the whole
  command, from exec to exit, on an engine with none of asyncdeploy's workloads;
* **asyncdeploy --help**;
* the floors: **python -c pass** (the interpreter) and **the design's libraries** (``import
  click, attrs, anyio, aiodocker``: what any Docker command of this CLI must load; aiodocker
  brings aiohttp, which builds two TLS contexts at import).

asyncdeploy runs as its console script does (``from asyncdeploy.cli import main``), from this
checkout, and with ``--compare-source DIR`` (``git archive main | tar -x -C DIR``) from that one
too, in the same rounds. The sources are compiled first (``compileall``), as ``pip install``
does: the environment may forbid writing bytecode, and compiling 60 modules at every start is
not what a user's install pays. Each row: the median, min and max wall time and the median CPU
(user+sys) of ``--runs`` runs. Goal (issue 25): ``docker list`` ≤ 0.25 s median wall.
Results: a table on stdout and ``bench-results/bench-start.json``.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
ENTRY = "import sys; from asyncdeploy.cli import main; sys.exit(main())"  # the console script's
LIST_GOAL = 0.25  # seconds: asyncdeploy --driver docker list, median wall (issue 25 item 7)
ENGINE_CLIS = {"docker": ["docker", "ps"], "podman": ["podman", "ps"]}


def timed(command: list[str], cwd: Path | None = None) -> tuple[float, float]:
    """Wall and CPU (user+sys) seconds of one process, run to its exit (it must succeed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, cwd=cwd, check=False, timeout=120)
    except subprocess.TimeoutExpired as exc:  # an engine that stopped answering
        raise RuntimeError(f"{command[:5]} did not end in 120 s") from exc
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{command[:5]} exited {done.returncode}: {done.stderr[-300:]!r}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu


def asyncdeploy(*args: str) -> list[str]:
    return [sys.executable, "-c", ENTRY, *args]


def rows(engines: list[str], compare: Path | None) -> dict[str, tuple[list[str], Path | None]]:
    """label -> (command, the directory it runs in: its asyncdeploy comes first on the path)."""
    out: dict[str, tuple[list[str], Path | None]] = {}
    for engine in engines:
        out[f"asyncdeploy --driver {engine} list"] = (asyncdeploy("--driver", engine, "list"), HERE)
        if compare is not None:
            out[f"asyncdeploy --driver {engine} list, compared"] = (
                asyncdeploy("--driver", engine, "list"),
                compare,
            )
        if shutil.which(ENGINE_CLIS[engine][0]):
            out[" ".join(ENGINE_CLIS[engine])] = (ENGINE_CLIS[engine], None)
    out["asyncdeploy --help"] = (asyncdeploy("--help"), HERE)
    if compare is not None:
        out["asyncdeploy --help, compared"] = (asyncdeploy("--help"), compare)
    out["python -c pass (the interpreter)"] = ([sys.executable, "-c", "pass"], None)
    libraries = "import click, attrs, anyio, aiodocker"
    out[f"floor: {libraries}"] = ([sys.executable, "-c", libraries], None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="3 runs: a smoke run")
    parser.add_argument("--engines", default="docker,podman", help="comma-separated")
    parser.add_argument("--compare-source", type=Path, default=None)
    parser.add_argument("--out", default="bench-results/bench-start.json")
    args = parser.parse_args()
    runs = 3 if args.quick else args.runs
    engines = [e for e in args.engines.split(",") if e]
    for source in filter(None, (HERE, args.compare_source)):
        compileall.compile_dir(source / "asyncdeploy", quiet=1)
    table = rows(engines, args.compare_source)
    for label, (command, cwd) in list(table.items()):
        try:
            timed(command, cwd)  # warm the page cache
        except RuntimeError as exc:  # an engine that does not answer now: its rows are left out
            print(f"skipped {label}: {exc}", file=sys.stderr)
            del table[label]
    engines = [e for e in engines if f"asyncdeploy --driver {e} list" in table]
    walls: dict[str, list[float]] = {label: [] for label in table}
    cpus: dict[str, list[float]] = {label: [] for label in table}
    for _ in range(runs):
        for label, (command, cwd) in table.items():
            wall, cpu = timed(command, cwd)
            walls[label].append(wall)
            cpus[label].append(cpu)
    load = os.getloadavg()[0]
    print(f"The CLI's start, median of {runs} runs (load average {load:.1f})")
    print(f"{'':58} {'median s':>9} {'min':>7} {'max':>7} {'CPU s':>7}")
    result: dict[str, Any] = {"runs": runs, "load_average": load, "rows": {}}
    for label in table:
        median = statistics.median(walls[label])
        cpu = statistics.median(cpus[label])
        low, high = min(walls[label]), max(walls[label])
        print(f"{label:58} {median:9.3f} {low:7.3f} {high:7.3f} {cpu:7.3f}")
        result["rows"][label] = {"median": median, "cpu_median": cpu, "values": walls[label]}
    for engine in engines:
        mine = result["rows"][f"asyncdeploy --driver {engine} list"]["median"]
        theirs = result["rows"].get(" ".join(ENGINE_CLIS[engine]))
        ratio = f", {mine / theirs['median']:.1f}x {ENGINE_CLIS[engine][0]}'s" if theirs else ""
        goal = f" (goal <= {LIST_GOAL:g} s)" if engine == "docker" else ""
        print(f"asyncdeploy --driver {engine} list: {mine:.3f} s{goal}{ratio}")
    if args.compare_source:
        result["compare_source"] = str(args.compare_source)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
