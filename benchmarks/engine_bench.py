"""One engine's benchmark: the scenarios (raw, peer, asyncdeploy), their interleaved runs, the
RSS probe and the clean-up."""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiodocker
import analysis
import anyio
import attrs
from common import GRACE, HERE, RUN_LABEL, SCENARIO_TIMEOUT, Config, Scenario, log
from peer_client import Peer, peer_install_problem
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
    raw_pods_kill_wait,
    raw_serial,
)

from asyncdeploy import Container, ContainerExited, Deployer, WorkloadPlan, open_deployer

__all__ = ["EngineBench"]


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
            scenario.prefixes.append([f"{name}_run"])
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
            scenario.prefixes.append([f"{nm}_run" for nm in names])
            t0, t0_ns = time.perf_counter(), time.time_ns()
            async with deployer.terminate_all(
                {RUN_LABEL: base}, grace_period_seconds=GRACE
            ) as events:
                extra = await self._consume(events, scenario.key, t0)
            return Timed(time.perf_counter() - t0, t0_ns, time.time_ns(), tuple(names), extra)

        scenario.run = run
        return scenario

    def raw_pods_scenario(self, workloads: int, per: int) -> Scenario:
        """The floor delete-all is held to: the same W pods built by hand, drained at once."""
        title = f"raw-pods-kill-wait {workloads} pods x{per}"
        scenario = Scenario(f"raw-pods-{workloads}x{per}", "raw", title, workloads * per, GRACE)

        async def run(_: int) -> Timed:
            base = self.name(f"rp{workloads}x{per}")
            pods = []
            for k in range(workloads):
                names = [f"{base}w{k:02d}-c{j}" for j in range(per)]
                pause, containers = await create_pod(
                    self.docker, f"{base}w{k:02d}", names, self.labels(base)
                )
                pods.append((pause, containers, names))
            await anyio.sleep(1)
            scenario.prefixes.append([name for _, _, names in pods for name in names])
            return await raw_pods_kill_wait(pods, GRACE)

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
            out.append(self.raw_pods_scenario(workloads, per))
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
        return analysis.result(self)

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
