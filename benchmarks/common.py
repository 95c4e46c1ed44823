"""What every part of the benchmark shares: engine addresses, the drain shape, the configuration,
the scenario record, and small statistics helpers."""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import attrs
from raw import Timed

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


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def waves(times: Sequence[float], gap: float = 1.0) -> int:
    ordered = sorted(times)
    return 1 + sum(1 for a, b in itertools.pairwise(ordered) if b - a > gap)
