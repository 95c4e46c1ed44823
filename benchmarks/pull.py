"""Pull time of a few-hundred-MB image from the local registry: asyncdeploy beside the engine's
own CLI (``docker pull`` / ``podman pull``), on each engine, in one run.

    python benchmarks/pull.py [--engines docker,podman] [--size-mb 300] [--runs 3] [--smoke]

(``nox -s bench`` runs it after the drain benchmark.) The image is the python test image plus one
layer of ``--size-mb`` random bytes, built once with Docker and pushed to ci/start-registry.sh's
registry (127.0.0.1:5000) as ``asyncdeploy-bench/pull:<size>mb``. Before every pull the image is
removed from the engine, so each pull downloads that layer (the python layers underneath are
shared with the local test image and stay). The runs are interleaved (asyncdeploy, CLI, ...).

* **asyncdeploy**: ``Deployer.create`` of a one-container workload with ``image_pull_policy:
  Always``; the figure is ``PullFinished.seconds`` (the engine's pull plus the inspect that reads
  the digest), the create itself is not counted.
* **cli**: wall time of ``docker pull -q`` / ``podman pull -q`` (a process start included).

``--smoke`` pulls a 20 MB layer once on each engine: it shows the benchmark runs, its figures
mean nothing. Results: a table on stdout, ``bench-results/pull.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio

from asyncdeploy import Container, PullFinished, WorkloadPlan, open_deployer

REGISTRY = "127.0.0.1:5000"
BASE = "asyncdeploy-test/python:latest"
PAUSE = "asyncdeploy-test/pause:latest"
BENCH_LABEL = "asyncdeploy-bench"


def log(message: str) -> None:
    print(f"[pull-bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ensure_image(size_mb: int) -> str:
    """Build and push the benchmark image unless the registry has it already."""
    repository, tag = "asyncdeploy-bench/pull", f"{size_mb}mb"
    reference = f"{REGISTRY}/{repository}:{tag}"
    accept = {"Accept": "application/vnd.docker.distribution.manifest.v2+json"}
    url = f"http://{REGISTRY}/v2/{repository}/manifests/{tag}"
    try:  # the bench venv has the package only: the standard library asks the registry
        with urllib.request.urlopen(urllib.request.Request(url, headers=accept, method="HEAD")):
            return reference
    except urllib.error.HTTPError:
        pass
    log(f"building {reference} ({size_mb} MB of random data on {BASE})")
    with tempfile.TemporaryDirectory() as context:
        with open(Path(context, "blob"), "wb") as blob:
            blob.writelines(os.urandom(1 << 20) for _ in range(size_mb))
        Path(context, "Dockerfile").write_text(f"FROM {BASE}\nCOPY blob /blob\n")
        for command in (
            ["docker", "build", "-q", "-t", reference, context],
            ["docker", "push", "-q", reference],
            ["docker", "rmi", reference],
        ):
            subprocess.run(command, check=True, capture_output=True)
    return reference


async def remove(engine: str, reference: str) -> None:
    await anyio.run_process([engine, "rmi", reference], check=False)


async def pull_with_asyncdeploy(engine: str, reference: str) -> float:
    name = f"pull-bench-{secrets.token_hex(3)}"
    plan = WorkloadPlan(
        name=name,
        labels={BENCH_LABEL: "1", "asyncdeploy-pull-bench": name},
        pause_image=PAUSE,
        containers=[
            Container(
                name="app", image=reference, command=["sleep", "60"], image_pull_policy="Always"
            )
        ],
    )
    finished: list[PullFinished] = []
    async with open_deployer(engine) as deployer:
        try:
            await deployer.create(
                plan, on_event=lambda e: finished.append(e) if isinstance(e, PullFinished) else None
            )
        finally:
            with anyio.CancelScope(shield=True):
                await deployer.delete_all({"asyncdeploy-pull-bench": name}, grace_period_seconds=0)
    [event] = finished
    return event.seconds


async def pull_with_cli(engine: str, reference: str) -> float:
    started = time.perf_counter()
    await anyio.run_process([engine, "pull", "-q", reference], check=True)
    return time.perf_counter() - started


async def bench(engines: list[str], reference: str, runs: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for engine in engines:
        samples: dict[str, list[float]] = {"asyncdeploy": [], "cli": []}
        for i in range(runs):
            for how, pull in (("asyncdeploy", pull_with_asyncdeploy), ("cli", pull_with_cli)):
                await remove(engine, reference)
                seconds = await pull(engine, reference)
                samples[how].append(seconds)
                log(f"{engine} {how} run {i + 1}: {seconds:.2f} s")
        await remove(engine, reference)
        results[engine] = {
            how: {"median_s": statistics.median(values), "runs_s": values}
            for how, values in samples.items()
        }
    return results


def table(results: dict[str, Any], size_mb: int) -> str:
    rows = [f"pull of {size_mb} MB from {REGISTRY} (median seconds)"]
    rows.append(f"{'ENGINE':<8} {'ASYNCDEPLOY':>12} {'CLI PULL':>10} {'RATIO':>7}")
    for engine, figures in results.items():
        ours, cli = figures["asyncdeploy"]["median_s"], figures["cli"]["median_s"]
        rows.append(f"{engine:<8} {ours:>12.2f} {cli:>10.2f} {ours / cli:>7.2f}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="docker,podman", help="comma-separated")
    parser.add_argument("--size-mb", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="20 MB, one run: shows it runs")
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    size, runs = (20, 1) if args.smoke else (args.size_mb, args.runs)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    reference = ensure_image(size)
    results = anyio.run(bench, engines, reference, runs)
    print(table(results, size))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    data = {"image": reference, "size_mb": size, "runs": runs, "results": results}
    Path(args.out, "pull.json").write_text(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
