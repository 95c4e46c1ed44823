"""Peak memory of one asyncdeploy delete-all, in a process of its own.

``python benchmarks/rss.py ENGINE URL KEY=VALUE GRACE`` opens a deployer, drains every workload
matching the selector (created beforehand by ``bench.py``, so creation is not counted), and
prints one JSON line: VmHWM (the peak resident set, from /proc/self/status) at the end, VmRSS
after the imports and after the connection, and the delete-all time.
"""

from __future__ import annotations

import json
import sys
import time


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def main() -> None:
    engine, url, selector, grace = sys.argv[1:5]
    started = _status_kb("VmRSS")
    import anyio

    from asyncdeploy import open_deployer

    imported = _status_kb("VmRSS")
    key, _, value = selector.partition("=")

    async def run() -> dict[str, object]:
        async with open_deployer(engine, url=url) as deployer:
            connected = _status_kb("VmRSS")
            t0 = time.perf_counter()
            summaries = await deployer.delete_all({key: value}, grace_period_seconds=int(grace))
            seconds = time.perf_counter() - t0
        return {
            "vmrss_connected_kb": connected,
            "seconds": seconds,
            "workloads": len(summaries),
            "containers": sum(len(s.containers) for s in summaries),
            "exited": sum(s.count("exited") for s in summaries),
            "errors": [e for s in summaries for e in s.errors],
        }

    result = anyio.run(run)
    print(
        json.dumps(
            {
                "vmrss_start_kb": started,
                "vmrss_imported_kb": imported,
                **result,
                "vmrss_end_kb": _status_kb("VmRSS"),
                "vmhwm_kb": _status_kb("VmHWM"),
            }
        )
    )


if __name__ == "__main__":
    main()
