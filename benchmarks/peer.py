"""The peer's side of the benchmark: gpustack-runtime driven through its public facade.

Run by ``bench.py`` with the bench-only venv's python (never asyncdeploy's), as a worker that
reads one JSON request per line on stdin and answers one JSON line on stdout::

    {"op": "hello"}
    {"op": "create", "name": "w", "n": 8, "labels": {...}}
    {"op": "delete", "name": "w", "grace": 5}
    {"op": "delete_all", "labels": {...}, "grace": 5}

Timing is ``perf_counter`` around the facade call only. The engine is chosen through the
environment variables of peer-baseline.md (``GPUSTACK_RUNTIME_DEPLOY`` and friends), which
``bench.py`` sets. Uses only the standard library, gpustack-runtime and its SDKs.

Shim (as peer-baseline.md, shim 1): without CAP_SYS_RESOURCE, runc cannot apply gpustack's
pause container ``oom_score_adj=-998``; negative values are dropped inside docker-py/podman-py
``create``, only when this process lacks that capability, and the hello answer says so.
"""

from __future__ import annotations

import functools
import json
import sys
import time
import traceback
from typing import Any

DRAIN_COMMAND = ["sh", "-c", "trap 'sleep 2; exit 0' TERM; while true; do sleep 0.1; done"]
BUSYBOX = "asyncdeploy-test/busybox:latest"
CAP_SYS_RESOURCE = 24

SHIMS: list[str] = []


def _lacks_cap_sys_resource() -> bool:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return not (int(line.split()[1], 16) >> CAP_SYS_RESOURCE) & 1
    return True


def _drop_negative_oom(create: Any) -> Any:
    @functools.wraps(create)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        value = kwargs.get("oom_score_adj")
        if isinstance(value, int) and value < 0:
            del kwargs["oom_score_adj"]
        return create(self, *args, **kwargs)

    return wrapper


def install_shims() -> None:
    if not _lacks_cap_sys_resource():
        return
    import docker.models.containers
    import podman.domain.containers_manager

    for cls in (
        docker.models.containers.ContainerCollection,
        podman.domain.containers_manager.ContainersManager,
    ):
        cls.create = _drop_negative_oom(cls.create)
    SHIMS.append(
        "oom_score_adj: this host lacks CAP_SYS_RESOURCE, so runc rejects gpustack's pause "
        "container oom_score_adj=-998; negative values are dropped in docker-py/podman-py create"
    )


def main() -> None:
    install_shims()
    import gpustack_runtime
    from gpustack_runtime import deployer as facade
    from gpustack_runtime.deployer import (
        Container,
        ContainerExecution,
        ContainerProfileEnum,
        WorkloadPlan,
    )
    from gpustack_runtime.deployer.__types__ import ContainerImagePullPolicyEnum

    def hello(_: dict[str, Any]) -> dict[str, Any]:
        import docker
        import podman

        return {
            "gpustack_runtime": gpustack_runtime.version,
            "docker_py": docker.__version__,
            "podman_py": podman.__version__,
            "python": sys.version.split()[0],
            "shims": SHIMS,
            "supported": [d.name for d in facade.supported_list()],
        }

    def create(req: dict[str, Any]) -> dict[str, Any]:
        plan = WorkloadPlan(
            name=req["name"],
            labels=dict(req["labels"]),
            containers=[
                Container(
                    image=BUSYBOX,
                    name=f"run{i}",
                    profile=ContainerProfileEnum.RUN,
                    image_pull_policy=ContainerImagePullPolicyEnum.IF_NOT_PRESENT,
                    execution=ContainerExecution(command=list(DRAIN_COMMAND)),
                )
                for i in range(req["n"])
            ],
        )
        t0 = time.perf_counter()
        facade.create_workload(plan)
        return {"seconds": time.perf_counter() - t0}

    def delete(req: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        facade.delete_workload(req["name"], None, req["grace"])
        return {"seconds": time.perf_counter() - t0}

    def delete_all(req: dict[str, Any]) -> dict[str, Any]:
        # What `gpustack-runtime delete-all` does: list, then delete one workload after another.
        t0 = time.perf_counter()
        workloads = facade.list_workloads(None, dict(req["labels"]))
        listed = time.perf_counter() - t0
        for workload in workloads:
            facade.delete_workload(workload.name, None, req["grace"])
        return {
            "seconds": time.perf_counter() - t0,
            "list_seconds": listed,
            "workloads": len(workloads),
        }

    ops = {"hello": hello, "create": create, "delete": delete, "delete_all": delete_all}
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            answer = {"ok": True, **ops[request["op"]](request)}
        except Exception as exc:  # noqa: BLE001 - every failure is answered, the worker goes on
            answer = {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "cause": repr(exc.__cause__) if exc.__cause__ else None,
                "traceback": traceback.format_exc(limit=6),
            }
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
