"""Memory over create → ready → delete cycles through one long-lived deployer.

    python benchmarks/memory.py [--cycles 400] [--engine docker] [--check exec|none]

Every ``--every`` cycles: the process's RSS, glibc's bytes in use and the free memory it keeps in
its heap (``mallinfo2``), the garbage collector's object count and the open descriptors; at the
end ``malloc_trim(0)`` and the RSS after it. Run it with ``PYTHONMALLOC=malloc`` to have
Python's own objects counted in glibc's figures too. What it showed (docs/benchmarks.md): RSS
grows ~8 KB a cycle while what is alive stays flat; the growth is freed memory glibc keeps,
which ``malloc_trim`` hands back.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import time

import anyio

from asyncdeploy import Checks, Container, Probe, WorkloadPlan, open_deployer


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


LIBC = ctypes.CDLL("libc.so.6")
LIBC.mallinfo2.restype = _MallInfo2


def sample(cycle: int, started: float) -> str:
    with open("/proc/self/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
    info = LIBC.mallinfo2()
    in_use = (info.uordblks + info.hblkhd) // 1024
    return (
        f"cycle {cycle:5} rss {rss} KB  glibc in use {in_use} KB, kept free {info.fordblks // 1024}"
        f" KB  objects {len(gc.get_objects())}  fds {len(os.listdir('/proc/self/fd'))}"
        f"  {time.monotonic() - started:.0f} s"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=400)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--engine", default="docker", choices=("docker", "podman"))
    parser.add_argument("--check", default="exec", choices=("exec", "none"))
    parser.add_argument("--image", default="asyncdeploy-test/busybox:latest")
    parser.add_argument("--pause-image", default="asyncdeploy-test/pause:latest")
    args = parser.parse_args()
    exec_check = Checks(readiness=Probe(exec=["true"], period_seconds=1))
    server = Container(
        name="server",
        image=args.image,
        command=["sleep", "3600"],
        checks=exec_check if args.check == "exec" else Checks(),
    )
    plan = WorkloadPlan(
        name=f"bench-memory-{os.getpid()}",
        labels={"asyncdeploy-bench": "1"},
        pause_image=args.pause_image,
        termination_grace_period_seconds=0,
        containers=[server],
    )
    settle = None if args.check == "exec" else 0.0  # no check: running is enough
    started = time.monotonic()
    async with open_deployer(args.engine) as deployer:  # type: ignore[call-overload]
        try:
            for cycle in range(args.cycles):
                await deployer.create(plan)
                await deployer.wait_ready(plan.name, timeout=60, settle_seconds=settle)
                await deployer.delete(plan.name, grace_period_seconds=0)
                if cycle % args.every == 0 or cycle == args.cycles - 1:
                    gc.collect()
                    print(sample(cycle, started), flush=True)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(60):
                if await deployer.list({"asyncdeploy-bench": "1"}):
                    await deployer.delete_all({"asyncdeploy-bench": "1"}, grace_period_seconds=0)
    LIBC.malloc_trim(0)
    print(f"after malloc_trim(0): {sample(args.cycles, started)}")


if __name__ == "__main__":
    anyio.run(main)
