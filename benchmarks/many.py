"""Many operations at once through one deployer, against the engine's own CLI in parallel.

    python benchmarks/many.py [--engines docker,podman] [--runs 3] [--n 40]
                                    [--compare-source DIR] [--quick]

Each workload is a pod (a pause container and one app that exits 1 s after SIGTERM), grace 5.
Side by side, interleaved round by round on each engine:

* ``cli-stop``: N shells at once, each ``ENGINE stop -t 5 APP; ENGINE rm APP PAUSE`` (the
  issue's baseline: what an operator's script does);
* ``terminate``: N concurrent ``Deployer.terminate()`` through one deployer;
* ``delete-all``: one ``terminate_all`` of the same N (what the concurrent calls should cost);
* ``cli-run`` / ``create``: N pods made by N shells of ``ENGINE run`` beside N concurrent
  ``Deployer.create()`` through one deployer;
* ``cli-delete`` (and ``cli-delete-g0``): the ``asyncdeploy`` CLI deleting one workload of three
  containers that drain 2 s (grace 5; grace 0), its whole process timed.

Every row: wall seconds; the engine daemon's CPU (dockerd + containerd; the Podman service and
its children) plus, for Podman's CLI, the CLI processes' own CPU (they do the engine's work
themselves); containers killed (exit 137) though they would have exited within the grace; the
last SignalSent's elapsed; and the engine HTTP requests per workload. With
``--compare-source DIR`` (``git worktree add --detach DIR main``, say) every asyncdeploy row also
runs that checkout's code in the same rounds (rows marked ``before``). The engines are shared:
other work on them shows in the CPU figures, so the rounds interleave and medians are given.
Results: a table per engine, ``bench-results/bench-many-<engine>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
WORKER = HERE / "many_worker.py"
PAUSE = "asyncdeploy-test/pause:latest"
BUSYBOX = "asyncdeploy-test/busybox:latest"
CLIS = {"docker": "docker", "podman": "podman"}
DAEMONS = {"docker": ("dockerd", "containerd"), "podman": ("podman system service",)}


def log(message: str) -> None:
    sys.stderr.write(f"[many {time.strftime('%H:%M:%S')}] {message}\n")


def daemon_pids(engine: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if any(command.startswith(d) for d in DAEMONS[engine]):
            pids.append(int(entry.name))
    return pids


def cpu_of(pids: Sequence[int]) -> float:
    """utime + stime of the processes, their waited-for children included, in seconds."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def worker(engine: str, op: str, tag: str, n: int, source: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    if source:
        env["PYTHONPATH"] = source
    done = await anyio.run_process(
        [sys.executable, str(WORKER), engine, op, tag, str(n)], env=env, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode(errors="replace")[-1500:])
    return dict(json.loads(done.stdout.decode().strip().splitlines()[-1]))


async def shells(commands: Sequence[str]) -> list[str]:
    outputs: list[str] = [""] * len(commands)

    async def one(i: int) -> None:
        done = await anyio.run_process(["sh", "-c", commands[i]], check=False)
        outputs[i] = done.stdout.decode()

    async with anyio.create_task_group() as tg:
        for i in range(len(commands)):
            tg.start_soon(one, i)
    return outputs


def container(tag: str, i: int, role: str) -> str:
    return f"{tag}-{i:02d}_{role}"  # asyncdeploy's container names: WORKLOAD_CONTAINER


class Bench:
    def __init__(self, engine: str, n: int, source: str | None) -> None:
        self.engine, self.n, self.source = engine, n, source  # source: this checkout's code
        self.cli = CLIS[engine]
        self.pids = daemon_pids(engine)
        self.rows: dict[str, list[dict[str, Any]]] = {}

    def keep(self, row: str, sample: dict[str, Any]) -> None:
        self.rows.setdefault(row, []).append(sample)
        log(f"{self.engine} {row}: {sample['seconds']:.2f} s, engine CPU {sample['cpu']:.2f} s")

    async def timed(self, row: str, coroutine: Any) -> None:
        before, client = cpu_of(self.pids), children_cpu()
        t0 = time.perf_counter()
        extra = await coroutine
        sample = {"seconds": time.perf_counter() - t0, **extra}
        sample.setdefault("worker_seconds", sample["seconds"])
        engine_cpu = cpu_of(self.pids) - before
        client_cpu = children_cpu() - client
        # Podman's CLI does the engine's work in its own processes
        sample["cpu"] = engine_cpu + (
            client_cpu if row.startswith("cli") and self.engine == "podman" else 0
        )
        sample["client_cpu"] = client_cpu
        self.keep(row, sample)

    async def made(self, source: str | None) -> str:
        tag = f"cb{secrets.token_hex(2)}"
        await worker(self.engine, "make", tag, self.n, source)
        await anyio.sleep(1)
        return tag

    async def cli_stop(self) -> None:
        tag = await self.made(self.source)
        cli, n = self.cli, self.n

        async def run() -> dict[str, Any]:
            commands = [
                f"{cli} stop -t 5 {container(tag, i, 'app')} >/dev/null; "
                f"{cli} inspect -f '{{{{.State.ExitCode}}}}' {container(tag, i, 'app')}; "
                f"{cli} rm {container(tag, i, 'app')} >/dev/null; "
                f"{cli} rm -f {container(tag, i, 'pause')} >/dev/null"
                for i in range(n)
            ]
            codes = [out.strip() for out in await shells(commands)]
            return {"ends": {f"exit {c}": codes.count(c) for c in set(codes)}}

        await self.timed("cli-stop", run())

    def label(self, row: str, source: str | None) -> str:
        return row + (" (before)" if source and source != self.source else "")

    async def ad(self, op: str, source: str | None) -> None:
        row = self.label(op, source)
        tag = await self.made(source)

        async def run() -> dict[str, Any]:
            result = await worker(self.engine, op, tag, self.n, source)
            result["worker_seconds"] = result.pop("seconds")
            return result

        await self.timed(row, run())

    async def cli_run(self) -> None:
        tag = f"cr{secrets.token_hex(2)}"
        cli = self.cli
        commands = [
            f"{cli} run -d --name {container(tag, i, 'pause')} -l asyncdeploy-bench=1 {PAUSE} "
            f">/dev/null && {cli} run -d --name {container(tag, i, 'app')} -l asyncdeploy-bench=1 "
            f"--network container:{container(tag, i, 'pause')} "
            f"--pid container:{container(tag, i, 'pause')} {BUSYBOX} "
            "sh -c \"trap 'sleep 1; exit 0' TERM; while true; do sleep 0.1; done\" >/dev/null"
            for i in range(self.n)
        ]

        async def run() -> dict[str, Any]:
            await shells(commands)
            return {}

        await self.timed("cli-run", run())
        await shells(
            [
                f"{cli} rm -f {container(tag, i, 'app')} {container(tag, i, 'pause')} >/dev/null 2>&1"
                for i in range(self.n)
            ]
        )

    async def ad_create(self, source: str | None) -> None:
        tag = f"cc{secrets.token_hex(2)}"

        async def run() -> dict[str, Any]:
            result = await worker(self.engine, "create", tag, self.n, source)
            result["worker_seconds"] = result.pop("seconds")
            return result

        await self.timed(self.label("create", source), run())
        await worker(self.engine, "delete-all", tag, self.n, self.source)

    async def cli_delete(self, grace: int, source: str | None) -> None:
        """The asyncdeploy CLI deleting one workload of three containers draining 2 s."""
        env = dict(os.environ)
        if source:
            env["PYTHONPATH"] = source
        name = f"cd{secrets.token_hex(2)}"
        make = (
            "import anyio, sys\n"
            "from asyncdeploy import open_deployer, Container, WorkloadPlan\n"
            "async def main():\n"
            f"    async with open_deployer('{self.engine}') as d:\n"
            f"        await d.create(WorkloadPlan(name='{name}', labels={{'asyncdeploy-bench': '1'}},"
            f" pause_image='{PAUSE}', termination_grace_period_seconds=5, containers=["
            f"Container(name=f'c{{i}}', image='{BUSYBOX}', command=['sh', '-c', "
            "\"trap 'sleep 2; exit 0' TERM; while true; do sleep 0.1; done\"]) for i in range(3)]))\n"
            "anyio.run(main)\n"
        )
        await anyio.run_process([sys.executable, "-c", make], env=env, check=True)
        await anyio.sleep(1)
        args = [sys.executable, "-m", "asyncdeploy", "--driver", self.engine, "delete", name]
        if grace == 0:
            args += ["--grace-period-seconds", "0"]

        async def run() -> dict[str, Any]:
            await anyio.run_process(args, env=env, check=True)
            return {}

        await self.timed(self.label(f"cli-delete{'-g0' if grace == 0 else ''}", source), run())


def killed(sample: dict[str, Any]) -> int:
    ends = sample.get("ends") or {}
    return sum(v for k, v in ends.items() if k.endswith("137"))


def summarize(bench: Bench) -> dict[str, Any]:
    table = {}
    for row, samples in bench.rows.items():
        requests = [sum((s.get("requests") or {}).values()) for s in samples]
        table[row] = {
            # in process from the first call (a control plane's view; no interpreter start-up),
            # else the shells' or the CLI process's whole wall time
            "seconds": statistics.median(s["worker_seconds"] for s in samples),
            "engine_cpu": statistics.median(s["cpu"] for s in samples),
            "killed": [killed(s) for s in samples],
            "last_signal": [round(max(s["signals"]), 2) for s in samples if s.get("signals")],
            "requests_per_workload": round(statistics.median(requests) / bench.n, 2)
            if any(requests)
            else None,
            "requests": samples[-1].get("requests"),
            "samples": samples,
        }
    return table


def render(engine: str, n: int, table: dict[str, Any]) -> str:
    lines = [
        f"\n{engine}: {n} at once (median of {len(next(iter(table.values()))['samples'])})",
        f"{'row':28} {'wall s':>7} {'engine CPU s':>12} {'killed':>10} {'last SignalSent':>16} {'calls/workload':>15}",
    ]
    for row, f in table.items():
        lines.append(
            f"{row:28} {f['seconds']:7.2f} {f['engine_cpu']:12.2f} {f['killed']!s:>10} "
            f"{f['last_signal']!s:>16} {f['requests_per_workload']!s:>15}"
        )

    def ratio(a: str, b: str, key: str) -> str:
        if a in table and b in table and table[b][key]:
            return f"{table[a][key] / table[b][key]:.2f}x"
        return "-"

    for who in ("", " (before)"):
        if "terminate" + who not in table:
            continue
        lines.append(
            f"terminate{who} vs cli-stop: wall {ratio('terminate' + who, 'cli-stop', 'seconds')}, "
            f"engine CPU {ratio('terminate' + who, 'cli-stop', 'engine_cpu')}; vs one delete-all: "
            f"wall {ratio('terminate' + who, 'delete-all' + who, 'seconds')}; "
            f"create{who} vs cli-run: wall {ratio('create' + who, 'cli-run', 'seconds')}, "
            f"engine CPU {ratio('create' + who, 'cli-run', 'engine_cpu')}"
        )
    return "\n".join(lines)


async def run_engine(engine: str, args: argparse.Namespace) -> dict[str, Any]:
    bench = Bench(engine, args.n, args.source)
    sources = [args.source] + ([args.compare_source] if args.compare_source else [])
    rows = set(args.rows.split(",")) if args.rows else None

    def wanted(row: str) -> bool:
        return rows is None or row in rows

    for r in range(args.runs):
        log(f"{engine}: round {r + 1}/{args.runs}")
        # this checkout and the other take turns at going first (what runs right after the
        # CLI rows meets the engine's own clean-up of them: Podman's cleanup processes)
        turn = sources if r % 2 == 0 else sources[::-1]
        if wanted("cli-stop"):
            await bench.cli_stop()
            await anyio.sleep(args.settle)
        for source in turn:
            for op in ("terminate", "delete-all"):
                if wanted(op):
                    await bench.ad(op, source)
                    await anyio.sleep(args.settle)
        if wanted("cli-run"):
            await bench.cli_run()
            await anyio.sleep(args.settle)
        for source in turn:
            if wanted("create"):
                await bench.ad_create(source)
                await anyio.sleep(args.settle)
        for source in turn:
            if wanted("cli-delete"):
                await bench.cli_delete(5, source)
                await bench.cli_delete(0, source)
    return summarize(bench)


async def amain(args: argparse.Namespace) -> int:
    out = anyio.Path(args.out)
    await out.mkdir(parents=True, exist_ok=True)
    for engine in [e for e in args.engines.split(",") if e]:
        table = await run_engine(engine, args)
        await (out / f"bench-many-{engine}.json").write_text(json.dumps(table, indent=2) + "\n")
        sys.stdout.write(render(engine, args.n, table) + "\n")
        sys.stdout.flush()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="docker,podman")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--quick", action="store_true", help="1 run of 10: a smoke run")
    parser.add_argument("--compare-source", default=None, help="another checkout's root")
    parser.add_argument(
        "--source", default=None, help="run this checkout's code (default: the installed one)"
    )
    parser.add_argument("--out", default="bench-results")
    parser.add_argument(
        "--settle", type=float, default=5.0, help="seconds of quiet between rows (engine clean-up)"
    )
    parser.add_argument(
        "--rows",
        default="",
        help="only these (cli-stop,terminate,delete-all,cli-run,create,cli-delete)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.n = 1, 10
    return anyio.run(amain, args)


if __name__ == "__main__":
    sys.exit(main())
