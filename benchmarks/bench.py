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
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiodocker
import anyio
from common import DEFAULT_PEER_PYTHON, ENGINE_URLS, Config, log
from engine_bench import EngineBench
from raw import cleanup
from report import render, targets

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
