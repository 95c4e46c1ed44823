"""asyncdeploy's drain against the physical limit and the peer, on real Docker and Podman.

    python benchmarks/bench.py [--engines docker,podman] [--runs 3] [--quick] [--no-peer]

(``nox -s bench`` runs this after preparing the peer's bench-only venv.)

Every container drains d = 2 s on SIGTERM (a ``sh`` trap on the busybox image); every delete
uses grace 5 unless the row says 0. On each engine, in one run, side by side:

* **raw** — the physical limit through the Engine API directly (aiodocker), plain containers
  with NetworkMode none: ``stop(t=5)`` + ``delete`` of N containers at once (raw-concurrent),
  ``kill TERM`` to all then ``wait`` under one deadline then remove (raw-kill-wait), and one
  container after another (raw-serial, N = 3 and 8 only: 32 would take ~70 s a run); plus
  raw-pod-kill-wait, the same kill-wait on asyncdeploy's pod shape built by hand (a bridge
  pause container that the N containers join, removed last): what is left between it and
  asyncdeploy is the library's own cost, what is between it and raw-kill-wait is the pod's;
* **peer** — gpustack-runtime's public facade (``benchmarks/peer.py`` in its own venv);
* **asyncdeploy** — ``Deployer.terminate`` (what ``delete`` runs) of one workload of N run
  containers (+ its pause container), grace 5 and 0; ``terminate_all`` of W workloads x 3
  against one workload of the same total;
* **event latency** — the engine's ``die`` event (``timeNano``) to the moment the matching
  ``ContainerExited`` reaches the consumer (``time.time_ns()``, same host clock);
* **peak RSS** — VmHWM of a separate process running one delete-all of 100 containers;
* **CLI cold start** — ``python -m asyncdeploy --help`` and the ``asyncdeploy`` entry point.

Each figure is the median of ``--runs`` runs; the runs are interleaved (round 1 of every
scenario, then round 2, ...) so that drift hits every scenario alike. Creation is never timed,
and every run waits 1 s after creating. Everything is labelled ``asyncdeploy-bench=1`` and
removed by that label at the start, at the end, after a failure and on Ctrl-C.
Results: a table per engine on stdout, ``bench-results/bench-<engine>.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiodocker
import anyio
import attrs
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from raw import (
    BENCH_LABEL,
    BUSYBOX,
    DRAIN_COMMAND,
    PAUSE,
    PEER_PAUSE,
    EventLog,
    Timed,
    bounded_gather,
    cleanup,
    create_plain,
    create_pod,
    ensure_tag,
    raw_concurrent,
    raw_kill_wait,
    raw_serial,
)

from asyncdeploy import Container, ContainerExited, Deployer, WorkloadPlan, open_deployer

HERE = Path(__file__).resolve().parent
DEFAULT_PEER_PYTHON = "/var/cache/asyncdeploy-bench/peer-venv/bin/python"
ENGINE_URLS = {
    "docker": os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock",
    "podman": os.environ.get("CONTAINER_HOST") or "unix:///run/podman/podman.sock",
}
GRACE = 5
DRAIN_S = 2
RUN_LABEL = "asyncdeploy-bench-run"  # one value per scenario run: clean-up after a failure
SCENARIO_TIMEOUT = 240.0
PEER_TIMEOUT = 300.0


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- configuration -------------------------------------------------------------------------


@attrs.frozen
class Config:
    runs: int
    quick: bool
    delete_ns: tuple[int, ...]  # asyncdeploy / peer / every raw-* but serial, grace 5
    grace0_ns: tuple[int, ...]
    serial_ns: tuple[int, ...]
    delete_all: tuple[tuple[int, int], ...]  # (workloads, containers each)
    peer_delete_all: tuple[tuple[int, int], ...]
    rss_workloads: int
    rss_per_workload: int
    help_runs: int

    @classmethod
    def make(cls, args: argparse.Namespace) -> Config:
        if args.quick:
            return cls(
                runs=args.runs or 1,
                quick=True,
                delete_ns=(1, 8),
                grace0_ns=(8,),
                serial_ns=(3,),
                delete_all=((5, 3),),
                peer_delete_all=((5, 3),),
                rss_workloads=4,
                rss_per_workload=5,
                help_runs=3,
            )
        return cls(
            runs=args.runs or 3,
            quick=False,
            delete_ns=(1, 8, 32),
            grace0_ns=(8, 32),
            serial_ns=(3, 8),
            delete_all=((5, 3), (20, 3)),
            peer_delete_all=((5, 3),),
            rss_workloads=20,
            rss_per_workload=5,
            help_runs=11,
        )


# --- results -------------------------------------------------------------------------------


@attrs.define
class Scenario:
    key: str
    who: str  # raw | peer | asyncdeploy
    title: str
    n: int
    grace: int
    run: Callable[[int], Awaitable[Timed]] | None = None  # one run (round index) → timing
    samples: list[Timed] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)
    prefixes: list[list[str]] = attrs.field(factory=list)  # per sample: the drained containers


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _waves(times: Sequence[float], gap: float = 1.0) -> int:
    ordered = sorted(times)
    return 1 + sum(1 for a, b in itertools.pairwise(ordered) if b - a > gap)


# --- the peer worker -----------------------------------------------------------------------


@attrs.define
class Peer:
    """gpustack-runtime in its own venv, one long-lived worker process per engine."""

    process: Process
    stdout: BufferedByteReceiveStream
    hello: dict[str, Any]
    stderr_path: Path

    @classmethod
    async def start(cls, python: str, engine: str, url: str, stderr_path: Path) -> Peer:
        env = {
            **os.environ,
            "GPUSTACK_RUNTIME_DEPLOY": engine,
            "GPUSTACK_RUNTIME_DOCKER_HOST": ENGINE_URLS["docker"] if engine != "docker" else url,
            "GPUSTACK_RUNTIME_PODMAN_HOST": url if engine == "podman" else ENGINE_URLS["podman"],
            "CONTAINER_HOST": url if engine == "podman" else ENGINE_URLS["podman"],
            "GPUSTACK_RUNTIME_DEPLOY_IMAGE_PULL_POLICY": "IfNotPresent",
            "PYTHONUNBUFFERED": "1",
        }
        for kind in ("DOCKER", "PODMAN"):
            for image in ("PAUSE", "UNHEALTHY_RESTART"):
                env[f"GPUSTACK_RUNTIME_{kind}_{image}_IMAGE"] = PEER_PAUSE
        stderr_path.parent.mkdir(parents=True, exist_ok=True)
        with stderr_path.open("ab") as stderr:
            process = await anyio.open_process(
                [python, str(HERE / "peer.py")], env=env, stderr=stderr
            )
        assert process.stdout is not None
        peer = cls(process, BufferedByteReceiveStream(process.stdout), {}, stderr_path)
        peer.hello = await peer.call({"op": "hello"}, timeout=60)
        return peer

    @property
    def dead(self) -> bool:
        return self.process.returncode is not None

    async def call(self, request: dict[str, Any], *, timeout: float = PEER_TIMEOUT) -> Any:
        assert self.process.stdin is not None
        with anyio.fail_after(timeout):
            await self.process.stdin.send((json.dumps(request) + "\n").encode())
            line = await self.stdout.receive_until(b"\n", 1 << 20)
        answer = json.loads(line)
        if not answer.get("ok"):
            raise RuntimeError(
                f"peer {request['op']}: {answer.get('error')} ({answer.get('cause')})"
            )
        return answer

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            if self.process.stdin is not None:
                await self.process.stdin.aclose()
            with anyio.move_on_after(10):
                await self.process.wait()
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()


def peer_install_problem(python: str) -> str | None:
    """Why the peer cannot run (None when it can)."""
    if not Path(python).exists():
        return f"no peer venv python at {python} (nox -s bench creates it)"
    probe = subprocess.run(
        [python, "-c", "import gpustack_runtime, docker, podman"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines()
        return f"gpustack-runtime does not import in {python}: {lines[-1] if lines else '?'}"
    return None


# --- one engine ----------------------------------------------------------------------------


@attrs.define
class EngineBench:
    engine: str
    url: str
    config: Config
    out: Path
    peer_python: str | None
    peer_unavailable: str | None
    tag: str = attrs.field(factory=lambda: secrets.token_hex(2))
    client: aiodocker.Docker | None = None
    deployer: Deployer | None = None
    events: EventLog | None = None
    peer: Peer | None = None
    scenarios: list[Scenario] = attrs.field(factory=list)
    exited_at: dict[str, int] = attrs.field(factory=dict)  # engine name → consumer time_ns
    latency_groups: dict[str, list[str]] = attrs.field(factory=dict)
    meta: dict[str, Any] = attrs.field(factory=dict)
    rss: dict[str, Any] = attrs.field(factory=dict)
    counter: int = 0
    stack: AsyncExitStack = attrs.field(factory=AsyncExitStack)

    @property
    def docker(self) -> aiodocker.Docker:
        assert self.client is not None
        return self.client

    def labels(self, run_tag: str) -> dict[str, str]:
        return {BENCH_LABEL: "1", RUN_LABEL: run_tag}

    def name(self, short: str) -> str:
        self.counter += 1
        return f"ab{self.tag}-{short}-{self.counter:03d}"

    # --- scenarios ---

    def raw_scenario(self, kind: str, n: int) -> Scenario:
        runner, title = {
            "conc": (raw_concurrent, "raw-concurrent stop(t=5)+rm"),
            "kw": (raw_kill_wait, "raw-kill-wait TERM, wait, rm"),
            "serial": (raw_serial, "raw-serial stop(t=5)+rm"),
            "pod": (raw_kill_wait, "raw-pod-kill-wait (pause + N joined)"),
        }[kind]
        scenario = Scenario(f"raw-{kind}-{n}", "raw", title, n, GRACE)

        async def run(_: int) -> Timed:
            base = self.name(f"r{kind}{n}")
            names = [f"{base}-c{j:03d}" for j in range(n)]
            if kind == "pod":
                pause, containers = await create_pod(self.docker, base, names, self.labels(base))
                await anyio.sleep(1)
                scenario.prefixes.append(names)
                return await raw_kill_wait(containers, names, GRACE, pause)
            containers = await create_plain(self.docker, names, self.labels(base))
            await anyio.sleep(1)
            scenario.prefixes.append(names)
            return await runner(containers, names, GRACE)

        scenario.run = run
        return scenario

    def _plan(self, name: str, n: int, labels: dict[str, str]) -> WorkloadPlan:
        return WorkloadPlan(
            name=name,
            labels=labels,
            pause_image=PAUSE,
            containers=[
                Container(name=f"run{j:03d}", image=BUSYBOX, command=DRAIN_COMMAND)
                for j in range(n)
            ],
        )

    async def _consume(self, events: Any, group: str, t0: float) -> dict[str, Any]:
        """Drain the event stream as a consumer would; note when each step reached it."""
        exited = 0
        summaries = []
        phases: dict[str, float] = {}

        def mark(first: str | None, last: str) -> None:
            now = round(time.perf_counter() - t0, 4)
            if first is not None:
                phases.setdefault(first, now)
            phases[last] = now

        async for event in events:
            kind = type(event).__name__
            if isinstance(event, ContainerExited):
                engine_name = f"{event.workload}_{event.container}"
                self.exited_at[engine_name] = time.time_ns()
                self.latency_groups.setdefault(group, []).append(engine_name)
                exited += 1
                mark("exited_first", "exited_last")
            elif kind == "DrainStarted":
                mark("started_first", "started_last")
            elif kind == "SignalSent":
                mark("signal_first", "signal_last")
            elif kind == "ContainerForceKilled":
                mark("killed_first", "killed_last")
            elif kind == "ContainerRemoved":
                mark("removed_first", "removed_last")
            elif kind == "PauseRemoved":
                mark("pause_removed_first", "pause_removed_last")
            elif kind == "DrainFinished":
                mark(None, "finished_last")
                summaries.append(event.summary)
        outcomes: dict[str, int] = {}
        for summary in summaries:
            for c in summary.containers:
                outcomes[c.outcome] = outcomes.get(c.outcome, 0) + 1
        return {
            "container_exited_events": exited,
            "outcomes": outcomes,
            "errors": [e for s in summaries for e in s.errors],
            "phases": phases,
        }

    def ad_scenario(self, n: int, grace: int) -> Scenario:
        title = f"asyncdeploy delete (grace {grace})"
        scenario = Scenario(f"ad-delete-{n}-g{grace}", "asyncdeploy", title, n, grace)

        async def run(_: int) -> Timed:
            assert self.deployer is not None
            name = self.name(f"ad{n}g{grace}")
            await self.deployer.create(self._plan(name, n, self.labels(name)))
            await anyio.sleep(1)
            scenario.prefixes.append([f"{name}-run"])
            t0, t0_ns = time.perf_counter(), time.time_ns()
            async with self.deployer.terminate(name, grace_period_seconds=grace) as events:
                extra = await self._consume(events, scenario.key, t0)
            return Timed(time.perf_counter() - t0, t0_ns, time.time_ns(), (name,), extra)

        scenario.run = run
        return scenario

    def ad_delete_all_scenario(self, workloads: int, per: int) -> Scenario:
        n = workloads * per
        title = f"asyncdeploy delete-all {workloads}x{per}"
        scenario = Scenario(f"ad-delete-all-{workloads}x{per}", "asyncdeploy", title, n, GRACE)

        async def run(_: int) -> Timed:
            assert self.deployer is not None
            deployer = self.deployer
            base = self.name(f"da{workloads}x{per}")
            names = [f"{base}w{k:02d}" for k in range(workloads)]
            labels = self.labels(base)

            def creator(name: str) -> Callable[[], Awaitable[Any]]:
                return lambda: deployer.create(self._plan(name, per, labels))

            await bounded_gather([creator(nm) for nm in names], 3)
            await anyio.sleep(1)
            scenario.prefixes.append([f"{nm}-run" for nm in names])
            t0, t0_ns = time.perf_counter(), time.time_ns()
            async with deployer.terminate_all(
                {RUN_LABEL: base}, grace_period_seconds=GRACE
            ) as events:
                extra = await self._consume(events, scenario.key, t0)
            return Timed(time.perf_counter() - t0, t0_ns, time.time_ns(), tuple(names), extra)

        scenario.run = run
        return scenario

    def peer_scenario(self, n: int, grace: int) -> Scenario:
        title = f"peer delete_workload (grace {grace})"
        scenario = Scenario(f"peer-delete-{n}-g{grace}", "peer", title, n, grace)

        async def run(_: int) -> Timed:
            assert self.peer is not None
            name = self.name(f"pd{n}g{grace}")
            await self.peer.call(
                {"op": "create", "name": name, "n": n, "labels": self.labels(name)}
            )
            await anyio.sleep(1)
            scenario.prefixes.append([f"{name}-run"])
            t0_ns = time.time_ns()
            answer = await self.peer.call({"op": "delete", "name": name, "grace": grace})
            seconds = float(answer["seconds"])
            return Timed(seconds, t0_ns, time.time_ns(), (name,), {})

        scenario.run = run
        return scenario

    def peer_delete_all_scenario(self, workloads: int, per: int) -> Scenario:
        n = workloads * per
        title = f"peer delete-all {workloads}x{per} (list + delete loop)"
        scenario = Scenario(f"peer-delete-all-{workloads}x{per}", "peer", title, n, GRACE)

        async def run(_: int) -> Timed:
            assert self.peer is not None
            base = self.name(f"pa{workloads}x{per}")
            names = [f"{base}w{k:02d}" for k in range(workloads)]
            for name in names:
                await self.peer.call(
                    {"op": "create", "name": name, "n": per, "labels": self.labels(base)}
                )
            await anyio.sleep(1)
            scenario.prefixes.append([f"{nm}-run" for nm in names])
            t0_ns = time.time_ns()
            answer = await self.peer.call(
                {"op": "delete_all", "labels": {RUN_LABEL: base}, "grace": GRACE}
            )
            return Timed(
                float(answer["seconds"]),
                t0_ns,
                time.time_ns(),
                tuple(names),
                {"list_seconds": answer["list_seconds"], "workloads": answer["workloads"]},
            )

        scenario.run = run
        return scenario

    def plan_scenarios(self) -> list[Scenario]:
        """In the order of one round: the rows that are compared sit next to each other."""
        cfg = self.config
        out: list[Scenario] = []
        with_peer = self.peer is not None
        for n in cfg.delete_ns:
            out += [self.raw_scenario(kind, n) for kind in ("conc", "kw", "pod")]
            out.append(self.ad_scenario(n, GRACE))
            if with_peer:
                out.append(self.peer_scenario(n, GRACE))
        for n in cfg.grace0_ns:
            out.append(self.ad_scenario(n, 0))
            if with_peer:
                out.append(self.peer_scenario(n, 0))
        for workloads, per in cfg.delete_all:
            out += [self.ad_scenario(workloads * per, GRACE)]
            out.append(self.ad_delete_all_scenario(workloads, per))
        if with_peer:
            out += [self.peer_delete_all_scenario(w, p) for w, p in cfg.peer_delete_all]
        out += [self.raw_scenario("serial", n) for n in cfg.serial_ns]
        # an N that appears twice (e.g. one workload of 15 for delete-all) is one scenario
        unique: dict[str, Scenario] = {}
        for s in out:
            unique.setdefault(s.key, s)
        return list(unique.values())

    # --- running ---

    async def run(self) -> dict[str, Any]:
        started = time.perf_counter()
        self.client = aiodocker.Docker(url=self.url)
        try:
            async with anyio.create_task_group() as tg:
                try:
                    await self._run(tg)
                finally:
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self._teardown()
        self.meta["seconds"] = round(time.perf_counter() - started, 1)
        self.meta["loadavg_at_end"] = os.getloadavg()
        return self.result()

    async def _run(self, tg: Any) -> None:
        version = await self.docker.version()
        self.meta.update(
            loadavg_at_start=os.getloadavg(),
            engine=self.engine,
            url=self.url,
            version=version.get("Version"),
            api_version=version.get("ApiVersion"),
        )
        left = await cleanup(self.docker)
        if left:
            log(f"{self.engine}: removed {left} leftover bench container(s)")
        running = await self.docker.containers.list(filters={"status": ["running"]})
        self.meta["other_running_containers_at_start"] = len(running)
        self.meta["pause_image"] = await ensure_tag(self.docker, PAUSE, PEER_PAUSE)
        self.events = EventLog(self.url)
        await tg.start(self.events.run)
        self.deployer = await self.stack.enter_async_context(
            open_deployer(self.engine, url=self.url)
        )
        await self._start_peer()
        self.scenarios = self.plan_scenarios()
        rounds = self.config.runs
        for i in range(rounds):
            for scenario in self.scenarios:
                await self._one(scenario, i)
        await anyio.sleep(2)  # the last die/remove events of the stream
        await self._rss()

    async def _start_peer(self) -> None:
        self.meta["peer"] = {"available": False}
        if self.peer_unavailable:
            self.meta["peer"]["reason"] = self.peer_unavailable
            return
        if self.peer_python is None:
            self.meta["peer"]["reason"] = "--no-peer"
            return
        problem = await anyio.to_thread.run_sync(peer_install_problem, self.peer_python)
        if problem:
            self.meta["peer"]["reason"] = problem
            log(f"{self.engine}: peer missing: {problem}")
            return
        try:
            self.peer = await Peer.start(
                self.peer_python, self.engine, self.url, self.out / f"peer-{self.engine}.log"
            )
        except Exception as exc:  # noqa: BLE001 - any failure: the bench goes on without the peer
            reason = f"the peer worker did not start: {exc!r}"
            self.meta["peer"]["reason"] = reason + f" (see {self.out / f'peer-{self.engine}.log'})"
            log(f"{self.engine}: {reason}")
            return
        if self.engine not in self.peer.hello.get("supported", []):
            reason = f"gpustack-runtime does not support {self.engine} here: {self.peer.hello}"
            self.meta["peer"]["reason"] = reason
            log(f"{self.engine}: {reason}")
            await self.peer.close()
            self.peer = None
            return
        self.meta["peer"] = {"available": True, **self.peer.hello}
        for shim in self.peer.hello.get("shims", []):
            log(f"{self.engine}: peer shim applied — {shim}")

    async def _one(self, scenario: Scenario, i: int) -> None:
        if scenario.who == "peer" and self.peer is not None and self.peer.dead:
            scenario.errors.append(f"round {i + 1}: skipped, the peer worker had died")
            return
        log(f"{self.engine}: round {i + 1}/{self.config.runs} {scenario.key}")
        try:
            with anyio.fail_after(SCENARIO_TIMEOUT):
                assert scenario.run is not None
                sample = await scenario.run(i)
        except Exception as exc:  # noqa: BLE001 - recorded in the row; the other rows go on
            message = f"round {i + 1}: {type(exc).__name__}: {exc}"
            scenario.errors.append(message)
            log(f"{self.engine}: {scenario.key} FAILED {message}")
            if scenario.who == "peer" and self.peer is not None and self.peer.dead:
                log(f"{self.engine}: the peer worker died (see {self.peer.stderr_path})")
            if len(scenario.prefixes) > len(scenario.samples):
                scenario.prefixes.pop()
            with anyio.CancelScope(shield=True):
                await cleanup(self.docker)
            return
        scenario.samples.append(sample)
        log(f"{self.engine}:   {sample.seconds:.3f} s")

    async def _rss(self) -> None:
        """One delete-all of ~100 containers in a separate process; its VmHWM."""
        assert self.deployer is not None
        deployer = self.deployer
        cfg = self.config
        base = self.name("rss")
        names = [f"{base}w{k:02d}" for k in range(cfg.rss_workloads)]
        total = cfg.rss_workloads * cfg.rss_per_workload
        log(f"{self.engine}: creating {total} containers for the RSS probe")
        t0 = time.perf_counter()
        try:

            def creator(name: str) -> Callable[[], Awaitable[Any]]:
                return lambda: deployer.create(
                    self._plan(name, cfg.rss_per_workload, self.labels(base))
                )

            with anyio.fail_after(2 * SCENARIO_TIMEOUT):
                await bounded_gather([creator(nm) for nm in names], 3)
            created = time.perf_counter() - t0
            await anyio.sleep(1)
            with anyio.fail_after(SCENARIO_TIMEOUT):
                result = await anyio.run_process(
                    [
                        sys.executable,
                        str(HERE / "rss.py"),
                        self.engine,
                        self.url,
                        f"{RUN_LABEL}={base}",
                        str(GRACE),
                    ],
                    check=False,
                )
            if result.returncode != 0:
                raise RuntimeError(result.stderr.decode(errors="replace")[-800:])
            self.rss = {
                **json.loads(result.stdout.decode().strip().splitlines()[-1]),
                "workloads": cfg.rss_workloads,
                "run_containers": total,
                "create_seconds": round(created, 1),
            }
            log(f"{self.engine}: RSS probe VmHWM {self.rss['vmhwm_kb'] * 1024 / 1e6:.1f} MB")
        except Exception as exc:  # noqa: BLE001 - recorded; the tables still print
            self.rss = {"error": f"{type(exc).__name__}: {exc}"}
            log(f"{self.engine}: RSS probe failed: {exc}")
            with anyio.CancelScope(shield=True):
                await cleanup(self.docker)

    async def _teardown(self) -> None:
        with anyio.move_on_after(120):
            if self.peer is not None:
                await self.peer.close()
            await self.stack.aclose()
            if self.client is not None:
                try:
                    left = await cleanup(self.docker)
                    if left:
                        log(f"{self.engine}: removed {left} bench container(s) at the end")
                finally:
                    await self.client.close()

    # --- analysis ---

    def _die_stats(self, scenario: Scenario, index: int, sample: Timed) -> dict[str, Any]:
        assert self.events is not None
        prefixes = scenario.prefixes[index] if index < len(scenario.prefixes) else []
        dies = [
            e for name, e in self.events.die.items() if any(name.startswith(p) for p in prefixes)
        ]
        kills = [
            k
            for name, ks in self.events.kills.items()
            if any(name.startswith(p) for p in prefixes)
            for k in ks
            if k.signal in ("15", "SIGTERM")
        ]
        out: dict[str, Any] = {
            "seconds": round(sample.seconds, 4),
            "dies_seen": len(dies),
            **{k: v for k, v in sample.extra.items() if k != "wait_returned_ns"},
        }
        if dies:
            rel = [(e.time_ns - sample.start_ns) / 1e9 for e in dies]
            codes = [e.exit_code for e in dies]
            out.update(
                exit0=codes.count(0),
                exit137=codes.count(137),
                exit_other=len(codes) - codes.count(0) - codes.count(137),
                die_first_s=round(min(rel), 3),
                die_last_s=round(max(rel), 3),
                tail_s=round((sample.end_ns - max(e.time_ns for e in dies)) / 1e9, 3),
                waves=_waves(rel),
            )
        if kills:
            rel = [(k.time_ns - sample.start_ns) / 1e9 for k in kills]
            out.update(term_first_s=round(min(rel), 3), term_last_s=round(max(rel), 3))
        return out

    def latency(self) -> dict[str, Any]:
        assert self.events is not None
        by_group: dict[str, list[float]] = {}
        missing = 0
        for group, names in self.latency_groups.items():
            for name in names:
                die = self.events.die.get(name)
                if die is None:
                    missing += 1
                    continue
                by_group.setdefault(group, []).append((self.exited_at[name] - die.time_ns) / 1e6)
        every = [v for vs in by_group.values() for v in vs]

        def stats(values: list[float]) -> dict[str, Any]:
            return {
                "n": len(values),
                "median_ms": round(statistics.median(values), 1),
                "p95_ms": round(_pct(values, 0.95), 1),
                "min_ms": round(min(values), 1),
                "max_ms": round(max(values), 1),
            }

        floors: dict[str, list[float]] = {}
        for s in self.scenarios:
            if not s.key.startswith(("raw-kw-", "raw-pod-")):
                continue
            for sample in s.samples:
                for name, returned in sample.extra.get("wait_returned_ns", {}).items():
                    if name in self.events.die:
                        floors.setdefault(s.key, []).append(
                            (returned - self.events.die[name].time_ns) / 1e6
                        )
        result: dict[str, Any] = {"missing_die_events": missing}
        floor = [v for vs in floors.values() for v in vs]
        if floor:
            result["raw_wait_floor"] = stats(floor)
            result["raw_wait_floor_by_scenario"] = {k: stats(v) for k, v in floors.items()}
        if every:
            result["all"] = stats(every)
            graceful = [v for g, vs in by_group.items() if not g.endswith("-g0") for v in vs]
            if graceful:
                result["grace5"] = stats(graceful)
            result["by_scenario"] = {g: stats(vs) for g, vs in by_group.items()}
        return result

    def result(self) -> dict[str, Any]:
        rows = []
        for s in self.scenarios:
            samples = [self._die_stats(s, i, t) for i, t in enumerate(s.samples)]
            seconds = [t.seconds for t in s.samples]
            phases: dict[str, float] = {}
            for key in {k for r in samples for k in r.get("phases", {})}:
                values = [r["phases"][key] for r in samples if key in r.get("phases", {})]
                phases[key] = round(statistics.median(values), 3)
            rows.append(
                {
                    "phases_median_s": phases,
                    "key": s.key,
                    "who": s.who,
                    "title": s.title,
                    "n": s.n,
                    "grace": s.grace,
                    "median_s": round(statistics.median(seconds), 4) if seconds else None,
                    "min_s": round(min(seconds), 4) if seconds else None,
                    "max_s": round(max(seconds), 4) if seconds else None,
                    "runs": samples,
                    "errors": s.errors,
                }
            )
        return {
            "meta": self.meta,
            "config": attrs.asdict(self.config),
            "scenarios": rows,
            "event_latency": self.latency() if self.events else {},
            "rss": self.rss,
        }


# --- the CLI cold start --------------------------------------------------------------------


def time_cli(runs: int) -> dict[str, Any]:
    """Median wall time of fresh processes: ``python -m asyncdeploy --help`` and the script."""
    script = Path(sys.executable).parent / "asyncdeploy"
    commands = {
        "python -c pass (interpreter floor)": [sys.executable, "-c", "pass"],
        "python -m asyncdeploy --help": [sys.executable, "-m", "asyncdeploy", "--help"],
    }
    if script.exists():
        commands["asyncdeploy --help (entry point)"] = [str(script), "--help"]
    out: dict[str, Any] = {}
    for label, command in commands.items():
        subprocess.run(command, capture_output=True, check=True)  # warm the page cache
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run(command, capture_output=True, check=True)
            times.append(time.perf_counter() - t0)
        out[label] = {
            "median_ms": round(statistics.median(times) * 1000, 1),
            "min_ms": round(min(times) * 1000, 1),
            "max_ms": round(max(times) * 1000, 1),
            "runs": runs,
        }
    return out


# --- targets and the table -----------------------------------------------------------------


def _row(result: dict[str, Any], key: str) -> dict[str, Any] | None:
    for row in result["scenarios"]:
        if row["key"] == key and row["median_s"] is not None:
            return dict(row)
    return None


def targets(result: dict[str, Any], cli: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target: measured, reference, ratio, limit, pass/miss (None: not measurable)."""
    out: list[dict[str, Any]] = []

    planned = {row["key"] for row in result["scenarios"]}

    peer = result["meta"].get("peer", {})

    def ratio_target(
        name: str, mine: str, ref: str, limit: float, rule: str, *, faster: bool
    ) -> None:
        if mine not in planned:
            return  # not in this configuration (--quick)
        a, b = _row(result, mine), _row(result, ref)
        entry: dict[str, Any] = {"target": name, "limit": limit, "rule": rule}
        if a is None or b is None:
            missing = mine if a is None else ref
            why = f"no {missing} figure"
            if missing.startswith("peer") and not peer.get("available"):
                why += f" (peer missing: {peer.get('reason')})"
            entry.update(ok=None, why=why)
        else:
            ratio = b["median_s"] / a["median_s"] if faster else a["median_s"] / b["median_s"]
            entry.update(measured=a["median_s"], reference=b["median_s"], ratio=ratio)
            entry["ok"] = ratio >= limit if faster else ratio <= limit
        out.append(entry)

    for n in (1, 8, 32):
        ratio_target(
            f"delete N={n} vs raw-concurrent",
            f"ad-delete-{n}-g5",
            f"raw-conc-{n}",
            1.03 if n <= 8 else 1.05,
            f"asyncdeploy/raw <= {1.03 if n <= 8 else 1.05}x",
            faster=False,
        )
    for n in (8, 32):
        ratio_target(
            f"grace 0 N={n}: ≥1.3x faster than the peer",
            f"ad-delete-{n}-g0",
            f"peer-delete-{n}-g0",
            1.3,
            "peer/asyncdeploy >= 1.3x",
            faster=True,
        )
    for w, c in ((5, 3), (20, 3)):
        ratio_target(
            f"delete-all {w}x{c} vs one workload of {w * c}",
            f"ad-delete-all-{w}x{c}",
            f"ad-delete-{w * c}-g5",
            1.1,
            "delete-all/one workload <= 1.1x",
            faster=False,
        )
    lat = result.get("event_latency", {}).get("all")
    out.append(
        {
            "target": "event latency die → ContainerExited, median",
            "limit": 50.0,
            "rule": "<= 50 ms",
            "measured": lat["median_ms"] if lat else None,
            "p95": lat["p95_ms"] if lat else None,
            "ok": (lat["median_ms"] <= 50.0) if lat else None,
        }
    )
    for label, figures in cli.items():
        if "--help" in label:
            out.append(
                {
                    "target": f"{label} cold start, median",
                    "limit": 250.0,
                    "rule": "<= 250 ms",
                    "measured": figures["median_ms"],
                    "ok": figures["median_ms"] <= 250.0,
                }
            )
    rss = result.get("rss") or {}
    hwm = rss.get("vmhwm_kb")
    out.append(
        {
            "target": f"peak RSS, delete-all of {rss.get('run_containers', '?')} containers",
            "limit": 120.0,
            "rule": "<= 120 MB (10^6 B)",
            "measured": round(hwm * 1024 / 1e6, 1) if hwm else None,
            "ok": (hwm * 1024 / 1e6 <= 120.0) if hwm else None,
            **({"why": rss["error"]} if "error" in rss else {}),
        }
    )
    return out


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render(result: dict[str, Any], cli: dict[str, Any], target_list: list[dict[str, Any]]) -> str:
    meta = result["meta"]
    title = (
        f"=== {meta['engine']} {meta.get('version')} (API {meta.get('api_version')}) at "
        f"{meta['url']} — median of {result['config']['runs']} run(s), drain {DRAIN_S} s, "
        f"grace {GRACE} unless 0; {meta.get('seconds', '?')} s ==="
    )
    lines = ["", title]
    peer = meta.get("peer", {})
    if peer.get("available"):
        lines.append(
            f"peer: gpustack-runtime {peer.get('gpustack_runtime')} (docker-py "
            f"{peer.get('docker_py')}, podman-py {peer.get('podman_py')}), shims: "
            + ("; ".join(peer.get("shims") or []) or "none")
        )
    else:
        lines.append(f"peer: MISSING — {peer.get('reason', '?')}")
    lines.append(
        "load average at start/end: "
        + " / ".join(
            ", ".join(f"{x:.1f}" for x in meta.get(k, ()))
            for k in ("loadavg_at_start", "loadavg_at_end")
        )
        + f" (2 CPUs); {meta.get('other_running_containers_at_start', 0)} other running "
        "container(s) on the engine at the start"
    )
    header = (
        f"{'scenario':<44} {'N':>3} {'g':>2} {'median s':>9} {'min-max':>13} "
        f"{'exit 0/137/x':>12} {'die first-last':>15} {'tail s':>7} {'waves':>5}  vs"
    )
    lines += [header, "-" * len(header)]
    raw_conc = {r["n"]: r for r in result["scenarios"] if r["key"].startswith("raw-conc-")}
    raw_pod = {r["n"]: r for r in result["scenarios"] if r["key"].startswith("raw-pod-")}
    singles = {
        r["n"]: r
        for r in result["scenarios"]
        if r["key"].startswith("ad-delete-") and "g5" in r["key"]
    }
    peers_g0 = {
        r["n"]: r
        for r in result["scenarios"]
        if r["key"].startswith("peer-delete-") and r["grace"] == 0
    }
    for row in sorted(result["scenarios"], key=_order):
        runs = row["runs"]
        exits = (
            "{}/{}/{}".format(
                sum(r.get("exit0", 0) for r in runs),
                sum(r.get("exit137", 0) for r in runs),
                sum(r.get("exit_other", 0) for r in runs)
                + sum(row["n"] - r["dies_seen"] for r in runs),
            )
            if runs
            else "-"
        )
        firsts = [r["die_first_s"] for r in runs if "die_first_s" in r]
        lasts = [r["die_last_s"] for r in runs if "die_last_s" in r]
        tails = [r["tail_s"] for r in runs if "tail_s" in r]
        waves = [r["waves"] for r in runs if "waves" in r]
        die = f"{statistics.median(firsts):.2f}-{statistics.median(lasts):.2f}" if firsts else "-"
        vs = ""
        median = row["median_s"]
        if median is not None:
            ref = None
            if row["key"].startswith("ad-delete-all-"):
                ref = singles.get(row["n"])
                label = "one workload"
            elif row["who"] == "asyncdeploy" and row["grace"] == 0:
                ref = peers_g0.get(row["n"])
                label = "peer"
            elif row["grace"] == GRACE and (
                row["who"] != "raw" or row["key"].startswith(("raw-kw", "raw-pod"))
            ):
                ref = raw_conc.get(row["n"])
                label = "raw-conc"
            if ref is not None and ref["median_s"]:
                vs = f"{median / ref['median_s']:.3f}x {label}"
            pod = raw_pod.get(row["n"])
            if row["who"] != "raw" and row["grace"] == GRACE and pod and pod["median_s"]:
                vs += f", {median / pod['median_s']:.3f}x raw-pod"
        minmax = f"{_fmt(row['min_s'], 2)}-{_fmt(row['max_s'], 2)}"
        lines.append(
            f"{row['title']:<44} {row['n']:>3} {row['grace']:>2} {_fmt(median):>9} {minmax:>13} "
            f"{exits:>12} {die:>15} "
            f"{_fmt(statistics.median(tails) if tails else None, 2):>7} "
            f"{(max(waves) if waves else '-')!s:>5}  {vs}"
        )
        for error in row["errors"]:
            lines.append(f"    ! {error[:160]}")
    if not any(r["key"].startswith("raw-serial-32") for r in result["scenarios"]):
        lines.append("(raw-serial N=32 skipped: ~70 s a run, 32 x (drain + rm))")
    lines += _phase_lines(result)
    lines += _latency_lines(result.get("event_latency", {}))
    rss = result.get("rss") or {}
    if "vmhwm_kb" in rss:
        lines.append(
            f"peak RSS: VmHWM {rss['vmhwm_kb'] * 1024 / 1e6:.1f} MB for one delete-all of "
            f"{rss['run_containers']} run containers in {rss['workloads']} workloads "
            f"({rss['seconds']:.2f} s; after imports {rss['vmrss_imported_kb'] * 1024 / 1e6:.1f} MB)"
        )
    elif rss:
        lines.append(f"peak RSS: FAILED {rss.get('error')}")
    for label, figures in cli.items():
        lines.append(
            f"{label}: median {figures['median_ms']} ms (min {figures['min_ms']}, max "
            f"{figures['max_ms']}, {figures['runs']} runs)"
        )
    lines += ["", "targets:"]
    for t in target_list:
        mark = {True: "PASS", False: "MISS", None: "n/a "}[t.get("ok")]
        if "ratio" in t:
            figure = (
                f"{t['measured']:.3f} s vs {t['reference']:.3f} s → {t['ratio']:.3f}x ({t['rule']})"
            )
        elif t.get("measured") is not None:
            figure = f"{t['measured']} ({t['rule']})" + (
                f", p95 {t['p95']} ms" if t.get("p95") is not None else ""
            )
        else:
            figure = t.get("why", "not measured")
        lines.append(f"  [{mark}] {t['target']:<52} {figure}")
    return "\n".join(lines)


_PHASES = (
    ("started_first", "DrainStarted"),
    ("signal_first", "TERM first"),
    ("signal_last", "TERM last"),
    ("exited_first", "exit first"),
    ("exited_last", "exit last"),
    ("removed_last", "run rm last"),
    ("pause_removed_last", "pause rm"),
    ("finished_last", "finished"),
)


def _phase_lines(result: dict[str, Any]) -> list[str]:
    """When each step of asyncdeploy's drains reached the consumer (s from the call, medians)."""
    rows = [r for r in sorted(result["scenarios"], key=_order) if r["who"] == "asyncdeploy"]
    if not rows:
        return []
    header = f"{'asyncdeploy steps, s from the call (median)':<44} {'N':>3} {'g':>2} " + " ".join(
        f"{label:>12}" for _, label in _PHASES
    )
    lines = ["", header]
    for row in rows:
        phases = row.get("phases_median_s") or {}
        lines.append(
            f"{row['title']:<44} {row['n']:>3} {row['grace']:>2} "
            + " ".join(f"{_fmt(phases.get(key)):>12}" for key, _ in _PHASES)
        )
    lines.append("")
    return lines


def _latency_lines(lat: dict[str, Any]) -> list[str]:
    """Event latency per scenario, next to the raw floor (the raw baselines' own wait())."""
    if not lat.get("all"):
        return []
    lines = [
        (
            "event latency, ms: engine die event (timeNano) → ContainerExited at the consumer "
            f"({lat['missing_die_events']} exits without a die event)"
        ),
        f"  {'':<38} {'n':>4} {'median':>7} {'p95':>7} {'max':>7}",
    ]

    def line(label: str, st: dict[str, Any]) -> str:
        return (
            f"  {label:<38} {st['n']:>4} {st['median_ms']:>7.1f} {st['p95_ms']:>7.1f} "
            f"{st['max_ms']:>7.1f}"
        )

    for key, st in lat.get("by_scenario", {}).items():
        lines.append(line(key, st))
    lines.append(line("asyncdeploy, all", lat["all"]))
    for key, st in lat.get("raw_wait_floor_by_scenario", {}).items():
        lines.append(line(f"floor: {key} wait() return", st))
    if lat.get("raw_wait_floor"):
        lines.append(line("floor: raw wait() return, all", lat["raw_wait_floor"]))
    return lines


_WHO = {"raw": 0, "asyncdeploy": 1, "peer": 2}


def _order(row: dict[str, Any]) -> tuple[int, int, int, int, str]:
    delete_all = 1 if "delete-all" in row["key"] else 0
    serial = 1 if "serial" in row["key"] else 0
    return (serial, delete_all, -row["grace"], row["n"], f"{_WHO[row['who']]}{row['key']}")


# --- main ----------------------------------------------------------------------------------


async def _answers(url: str) -> str | None:
    client = aiodocker.Docker(url=url)
    try:
        with anyio.fail_after(5):
            await client.version()
        return None
    except Exception as exc:  # noqa: BLE001 - whatever it is, the engine does not answer
        return f"{type(exc).__name__}: {exc}"
    finally:
        await client.close()


async def _cleanup_everywhere(engines: Sequence[str]) -> None:
    for engine in engines:
        client = aiodocker.Docker(url=ENGINE_URLS[engine])
        try:
            with anyio.move_on_after(120):
                removed = await cleanup(client)
                if removed:
                    log(f"{engine}: removed {removed} bench container(s)")
        except Exception as exc:  # noqa: BLE001 - best effort, on the way out
            log(f"{engine}: clean-up failed: {exc}")
        finally:
            await client.close()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="docker,podman", help="comma-separated")
    parser.add_argument("--runs", type=int, default=0, help="runs per figure (3; --quick: 1)")
    parser.add_argument("--quick", action="store_true", help="1 run, smaller N: a smoke run")
    parser.add_argument("--out", default="bench-results", help="directory for the JSON files")
    parser.add_argument("--peer-python", default=DEFAULT_PEER_PYTHON)
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--peer-unavailable", default=None, help="(from nox) why there is none")
    parser.add_argument("--docker-url", default=ENGINE_URLS["docker"])
    parser.add_argument("--podman-url", default=ENGINE_URLS["podman"])
    return parser.parse_args(argv)


async def amain(args: argparse.Namespace) -> int:
    ENGINE_URLS.update(docker=args.docker_url, podman=args.podman_url)
    config = Config.make(args)
    out = Path(args.out)
    wanted = [e.strip() for e in args.engines.split(",") if e.strip()]
    engines = []
    for engine in wanted:
        problem = await _answers(ENGINE_URLS[engine])
        if problem:
            log(f"{engine}: skipped, no answer at {ENGINE_URLS[engine]}: {problem}")
        else:
            engines.append(engine)
    if not engines:
        log("no engine answers")
        return 3
    log(f"CLI cold start ({config.help_runs} runs each)")
    cli = await anyio.to_thread.run_sync(time_cli, config.help_runs)
    host = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    reports = []
    try:
        for engine in engines:
            bench = EngineBench(
                engine,
                ENGINE_URLS[engine],
                config,
                out,
                None if args.no_peer else args.peer_python,
                args.peer_unavailable,
            )
            result = await bench.run()
            result["meta"]["host"] = host
            result["cli"] = cli
            result["targets"] = targets(result, cli)
            path = out / f"bench-{engine}.json"
            path.write_text(json.dumps(result, indent=2, default=str) + "\n")
            reports.append(render(result, cli, result["targets"]) + f"\n(JSON: {path})")
            print(reports[-1], flush=True)
    finally:
        with anyio.CancelScope(shield=True):
            await _cleanup_everywhere(engines)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    try:
        return anyio.run(amain, args)
    except KeyboardInterrupt:
        log("interrupted: removing the bench containers")
        engines = [e.strip() for e in args.engines.split(",") if e.strip()]
        anyio.run(_cleanup_everywhere, engines)
        return 130


if __name__ == "__main__":
    sys.exit(main())
