"""asyncdeploy's delete against ``kubectl delete --wait`` on a real Kubernetes cluster.

    python benchmarks/kube.py [--runs 5] [--smoke]      (``nox -s bench_kube``)

Needs the cluster ``ci/start-kube.sh`` starts (or any: ``ASYNCDEPLOY_TEST_KUBECONFIG``,
``ASYNCDEPLOY_KUBECTL``, ``ASYNCDEPLOY_TEST_K8S_IMAGE``, as it prints them). Every Pod has one
container that drains d = 2 s on SIGTERM (a ``sh`` trap), grace 10. Side by side, interleaved
round by round so that drift hits every row alike, in a namespace of its own:

* **asyncdeploy delete (CLI)** — ``python -m asyncdeploy --driver kubernetes delete NAME``, a
  process like kubectl's, from its start to its exit (the Pod is gone when it exits);
* **kubectl delete --wait** — ``kubectl delete pod NAME --wait``, the same Pod, same timing;
* **drain() in process** — ``KubernetesDriver.drain`` on an open connection: the library alone;
* **event latency** — from the time the kubelet recorded its ``Killing`` Event (the Event's
  name carries it in nanoseconds) to the moment ``SignalSent`` reaches the consumer of
  ``drain()`` (``time.time()``, same host clock);
* **asyncdeploy --help** — the CLI's start alone (goal ≤ 150 ms), and **kubectl --help**;
* **asyncdeploy list** beside **kubectl get pods** — a command that answers at once, run as the
  console script runs it (goal ≤ 0.5 s, issue 25), with two floors: the driver's own imports
  (``import asyncdeploy.drivers.kubernetes``: kubernetes-asyncio's client and kubeconfig loader
  without its generated API classes and models) and the whole library (``import
  kubernetes_asyncio``), as it was loaded before.

Each figure is the median of ``--runs`` runs (``--smoke``: one run, to show it works), with the
ratio of the CLI's delete to kubectl's (issue 18: goal ≤ 1.05). Creation is never timed.
``--compare-source DIR`` adds the CLI rows of another checkout (``git archive main | tar -x -C
DIR``), run in the same rounds: a change's before and after under the same load (on a shared
machine the load moves the CLI's figures by seconds between two runs). Results: a table on
stdout and ``bench-results/bench-kube.json``.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from kubernetes_asyncio.client import CoreV1Api

from asyncdeploy import Container, Event, SignalSent, WorkloadPlan
from asyncdeploy.drivers.kubernetes import KubernetesDriver
from asyncdeploy.drivers.kubernetes._kubelet import KILLING, event_time

SOURCE = Path(__file__).resolve().parent.parent  # this checkout: its asyncdeploy first on the path
DRAIN_SECONDS = 2.0
GRACE = 10
COMMAND = [
    "sh",
    "-c",
    f"trap 'sleep {DRAIN_SECONDS}; exit 0' TERM; while true; do sleep 1 & wait $!; done",
]


def plan(name: str, image: str) -> WorkloadPlan:
    return WorkloadPlan(
        name=name,
        labels={"asyncdeploy-bench": "1"},
        containers=[Container(name="server", image=image, command=COMMAND)],
        termination_grace_period_seconds=GRACE,
    )


async def ready_pod(driver: KubernetesDriver, name: str, image: str) -> None:
    await driver.apply(plan(name, image))
    await driver.wait_ready(name, timeout=120)
    await anyio.sleep(1)  # the trap is installed; creation is never timed


HELP_GOAL = 0.150  # seconds: asyncdeploy --help (issue 18 item 3)
DELETE_RATIO_GOAL = 1.05  # asyncdeploy delete / kubectl delete --wait
LIST_GOAL = 0.5  # seconds: asyncdeploy --driver kubernetes list, median wall (issue 25 item 7)
LIST = "asyncdeploy --driver kubernetes list"
COMPARED_LIST = f"{LIST}, compared checkout"
ENTRY = "import sys; from asyncdeploy.cli import main; sys.exit(main())"  # the console script's
COMPARED_DELETE = "asyncdeploy delete, compared checkout"
COMPARED_HELP = "asyncdeploy --help, compared checkout"


CPU = " (CPU user+sys)"  # a process row's CPU seconds: steadier than its wall time under load


async def timed_process(
    out: dict[str, float], key: str, command: list[str], env: dict[str, str], cwd: str | None = None
) -> None:
    """``out[key]``: the process's wall time, start to exit; ``out[key + CPU]``: its CPU time
    (the bench runs one process at a time, so the children's usage grows by its own)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = await anyio.run_process(command, env=env, check=False, cwd=cwd)
    out[key] = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out[key + CPU] = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if result.returncode != 0:
        raise RuntimeError(f"{command[:4]}... exited {result.returncode}: {result.stderr[-300:]!r}")


async def gone(driver: KubernetesDriver, name: str) -> bool:
    found = await driver.api.list_pods(driver.namespace, field_selector=f"metadata.name={name}")
    return not found.get("items")


async def one_round(
    driver: KubernetesDriver, args: argparse.Namespace, env: dict[str, str], round_no: int
) -> dict[str, float]:
    out: dict[str, float] = {}
    ns = driver.namespace

    name = f"cli-{round_no}-{secrets.token_hex(2)}"
    await ready_pod(driver, name, args.image)
    cli = [sys.executable, "-m", "asyncdeploy", "--driver", "kubernetes", "delete", name]
    await timed_process(out, "asyncdeploy delete (CLI)", cli, env)
    assert await gone(driver, name), "asyncdeploy delete returned before the Pod was gone"

    if args.compare_source:
        name = f"cmp-{round_no}-{secrets.token_hex(2)}"
        await ready_pod(driver, name, args.image)
        cli[-1] = name
        await timed_process(out, COMPARED_DELETE, cli, env, args.compare_source)
        assert await gone(driver, name), "asyncdeploy delete returned before the Pod was gone"

    name = f"kubectl-{round_no}-{secrets.token_hex(2)}"
    await ready_pod(driver, name, args.image)
    kubectl = [args.kubectl, "-n", ns, "delete", "pod", name, "--wait=true"]
    await timed_process(out, "kubectl delete --wait", kubectl, env)
    assert await gone(driver, name), "kubectl delete --wait returned before the Pod was gone"

    name = f"lib-{round_no}-{secrets.token_hex(2)}"
    await ready_pod(driver, name, args.image)
    uid = (await driver.api.read(ns, name))["metadata"]["uid"]
    seen: list[tuple[Event, float]] = []  # what Emit hands over (drain events only, here)
    started = time.perf_counter()
    await driver.drain(
        await driver.find([name]),
        grace_period_seconds=None,
        emit=lambda e: seen.append((e, time.time())),
    )
    out["drain() in process"] = time.perf_counter() - started
    events = await driver.api.list_events(ns, field_selector=f"involvedObject.uid={uid}")
    killing = [e for e in events.get("items") or [] if e.get("reason") == KILLING]
    signal = [at for e, at in seen if isinstance(e, SignalSent)]
    recorded = event_time(killing[0]) if killing else None
    if signal and recorded is not None:
        out["event latency Killing → SignalSent"] = signal[0] - recorded
    help_command = [sys.executable, "-m", "asyncdeploy", "--help"]
    await timed_process(out, "asyncdeploy --help", help_command, env)
    if args.compare_source:
        await timed_process(out, COMPARED_HELP, help_command, env, args.compare_source)
    await timed_process(out, "kubectl --help", [args.kubectl, "--help"], env)
    listing = [sys.executable, "-c", ENTRY, "--driver", "kubernetes", "list"]
    await timed_process(out, LIST, listing, env, str(SOURCE))
    if args.compare_source:
        await timed_process(out, COMPARED_LIST, listing, env, args.compare_source)
    await timed_process(out, "kubectl get pods", [args.kubectl, "get", "pods"], env)
    floors = {
        "floor: import asyncdeploy.drivers.kubernetes": "import asyncdeploy.drivers.kubernetes",
        "floor: import kubernetes_asyncio (all of it)": "import kubernetes_asyncio",
    }
    for key, code in floors.items():
        await timed_process(out, key, [sys.executable, "-c", code], env, str(SOURCE))
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="one run, to show it works")
    parser.add_argument("--kubeconfig", default=os.environ.get("ASYNCDEPLOY_TEST_KUBECONFIG"))
    parser.add_argument("--kubectl", default=os.environ.get("ASYNCDEPLOY_KUBECTL", "kubectl"))
    parser.add_argument(
        "--image",
        default=os.environ.get("ASYNCDEPLOY_TEST_K8S_IMAGE", "asyncdeploy-test/busybox:kube"),
    )
    parser.add_argument("--out", default="bench-results/bench-kube.json")
    parser.add_argument(
        "--compare-source",
        default=None,
        help="also run the CLI rows from this checkout (its asyncdeploy/ first on the path)",
    )
    args = parser.parse_args()
    if not args.kubeconfig:
        parser.error("no cluster: set ASYNCDEPLOY_TEST_KUBECONFIG (ci/start-kube.sh prints it)")
    runs = 1 if args.smoke else args.runs
    for source in filter(None, (str(SOURCE), args.compare_source)):
        # as pip install does: the environment may forbid writing bytecode, and compiling every
        # module at each start is not what a user's install pays
        compileall.compile_dir(Path(source) / "asyncdeploy", quiet=1)

    ns = f"asyncdeploy-bench-{secrets.token_hex(3)}"
    admin = await KubernetesDriver.connect(kubeconfig=args.kubeconfig)
    version = (await admin.ping()).version
    core = CoreV1Api(admin.api.client)
    await core.create_namespace({"metadata": {"name": ns}})  # type: ignore[arg-type]
    driver = await KubernetesDriver.connect(kubeconfig=args.kubeconfig, namespace=ns)
    # the CLI and kubectl: the same cluster, the bench's namespace as the context's default
    kubeconfig = Path(f"/tmp/{ns}.kubeconfig")
    config = await anyio.Path(args.kubeconfig).read_text()
    await anyio.Path(kubeconfig).write_text(
        config.replace("namespace: default", f"namespace: {ns}")
    )
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    rows: dict[str, list[float]] = {}
    try:
        with anyio.fail_after(30):
            while True:  # Pods are refused until the namespace's default ServiceAccount exists
                accounts = await core.list_namespaced_service_account(ns)
                if accounts.items:
                    break
                await anyio.sleep(0.2)
        for round_no in range(runs):
            for key, value in (await one_round(driver, args, env, round_no)).items():
                rows.setdefault(key, []).append(value)
    finally:
        with anyio.CancelScope(shield=True):
            await driver.aclose()
            await core.delete_namespace(ns)
            await admin.aclose()
            await anyio.Path(kubeconfig).unlink(missing_ok=True)

    print(
        f"Kubernetes delete of one Pod draining {DRAIN_SECONDS:g} s (grace {GRACE}), "
        f"median of {runs} run(s)"
    )
    print(f"{'':54} {'median s':>9} {'min':>7} {'max':>7}")
    result: dict[str, Any] = {"runs": runs, "drain_seconds": DRAIN_SECONDS, "rows": {}}
    for key, values in rows.items():
        print(f"{key:54} {statistics.median(values):9.3f} {min(values):7.3f} {max(values):7.3f}")
        result["rows"][key] = {"median": statistics.median(values), "values": values}
    medians = {key: value["median"] for key, value in result["rows"].items()}
    ratio = medians["asyncdeploy delete (CLI)"] / medians["kubectl delete --wait"]
    result["delete_ratio"] = ratio
    if COMPARED_DELETE in medians:
        compared = medians[COMPARED_DELETE] / medians["kubectl delete --wait"]
        result["compared_delete_ratio"] = compared
        print(f"the compared checkout ({args.compare_source}): {compared:.3f}x")
    print(
        f"{LIST}: {medians[LIST]:.3f} s (goal <= {LIST_GOAL:g} s), "
        f"{medians[LIST] / medians['kubectl get pods']:.1f}x kubectl get pods"
        + (
            f"; compared checkout {medians[COMPARED_LIST]:.3f} s"
            if COMPARED_LIST in medians
            else ""
        )
    )
    print(
        f"asyncdeploy delete / kubectl delete --wait: {ratio:.3f}x (goal <= {DELETE_RATIO_GOAL})"
        f"; asyncdeploy --help {medians['asyncdeploy --help'] * 1000:.0f} ms "
        f"(goal <= {HELP_GOAL * 1000:.0f} ms)"
    )
    if args.compare_source:
        result["compare_source"] = args.compare_source
    result["kubernetes"] = version
    await anyio.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    await anyio.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    anyio.run(main)
