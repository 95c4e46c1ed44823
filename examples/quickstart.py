"""The README's first Python snippet: the demo server, drained through its own hook.

The hook is the drain kit's command, on the demo image's PATH as ``python3 -m ...`` (a bare
``drain`` is no command there: the hook would fail with exit 126). Run by
tests/engines/test_first_use.py on Docker and Podman as written, bar the name and the pause
image (the test engines are offline).
"""

import anyio

from asyncdeploy import Container, Port, WorkloadPlan, open_deployer

DRAIN = ["python3", "-m", "asyncdeploy.workload.drain_cmd", "--propagation-wait", "2s"]

plan = WorkloadPlan(
    name="llm",
    termination_grace_period_seconds=30,
    containers=[
        Container(
            name="server",
            image="localhost/asyncdeploy/demo:latest",  # serves on 8080
            ports=[Port(container_port=8080)],
            pre_stop=DRAIN,  # fail readiness, wait 2 s for the balancer, drain in-flight requests
        )
    ],
)


async def main() -> None:
    async with open_deployer() as deployer:  # or "docker", "podman", "kubernetes"
        await deployer.create(plan)  # a no-op when nothing changed
        await deployer.wait_ready("llm")
        async with deployer.terminate("llm") as drain:
            async for event in drain:  # DrainStarted, PreStopFinished, SignalSent, ...
                print(event)  # drain.kill() would SIGKILL what is left now
        # drain.summaries: what it did; or just: summary = await deployer.delete("llm")


anyio.run(main)
