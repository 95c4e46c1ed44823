"""A container's ``gate:`` expanded into the sidecar it stands for: a plan-to-plan step.

For a container with ``gate: {upstream: 8001, ready: {path: /health}}`` and ``ports: [8000]``:

* a sidecar ``<name>-gate`` (the gate image) is put before it: it listens on 8000 (the data
  port: clients, balancers and Services), passes requests on to 127.0.0.1:8001, and has the
  readiness check (``GET /ready`` on 8000: the gate serving *and* the engine's ``/health``
  answering). Its drain is on its admin port (``gate.admin_port``, 9901), which no port
  mapping publishes and no Service selects, and answers only requests that carry the
  workload's admin token (a fresh random one per expansion, in the sidecar's environment);
* the container keeps its ports (they are the workload's, in one network namespace: the
  kubelet maps a Pod's host ports from its main containers only, not from sidecars) and gets
  ``pre_stop_http: GET :9901/-/drain?...&token=...``: the drain runs in the gate, before the
  engine's stop signal (Kubernetes: a preStop ``httpGet`` the kubelet sends from the node;
  Docker and Podman: the deployer sends it from its host), so the engine's image needs no tool;
* with ``protocol: h2c`` the gate speaks HTTP/2 to the engine (gRPC servers) and its engine
  check is a TCP connect to ``upstream``;
* the sidecar is signalled after the engine has exited (the sidecar order), and cuts streams
  still open ``GATE_MARGIN`` seconds before the grace period ends, leaving the engine time to
  exit on its signal before the SIGKILL.

Every driver receives the expanded plan (``Deployer`` expands it), so what a gate becomes is
written once, here, and tested without an engine. The one thing that is not pure is the token:
drawn per expansion, left out of ``plan_digest``, so applying the same plan again changes
nothing and the running workload keeps the token its gate and hook share.
"""

from __future__ import annotations

import secrets

import attrs

from asyncdeploy.plan import (
    GATE_TOKEN_ENV,
    Checks,
    Container,
    Gate,
    HTTPGet,
    Probe,
    WorkloadPlan,
    gate_name,
)

__all__ = [
    "DRAIN_PATH",
    "GATE_MARGIN",
    "expand_gates",
    "gate_listen_port",
    "gate_sidecar",
    "new_token",
]

DRAIN_PATH = "/-/drain"
#: Seconds of the grace period left after the gate's drain deadline: the engine's own exit.
GATE_MARGIN = 5


def gate_listen_port(container: Container) -> int:
    """The port a container's gate listens on, where clients and checks arrive: its first tcp
    port (the container keeps its ``gate.upstream``)."""
    return next(p.container_port for p in container.ports if p.protocol == "tcp")


def _cut_after(plan: WorkloadPlan) -> int:
    return max(1, plan.termination_grace_period_seconds - GATE_MARGIN)


def gate_sidecar(plan: WorkloadPlan, container: Container, gate: Gate, token: str) -> Container:
    """The sidecar that ``container``'s gate becomes (``token``: its admin token)."""
    listen = gate_listen_port(container)
    args = [
        "--listen", str(listen),
        "--admin-port", str(gate.admin_port),
        "--admin-token-env", GATE_TOKEN_ENV,
        "--upstream", str(gate.upstream),
        "--ready-path", gate.ready.path if gate.ready is not None else "",
        "--drain-timeout", f"{_cut_after(plan)}s",
        "--propagation-wait", f"{gate.propagation_seconds}s",
        "--check-interval", "1s",
        "--header-timeout", f"{gate.header_timeout_seconds}s",
        "--idle-timeout", f"{gate.idle_timeout_seconds}s",
    ]  # fmt: skip
    if gate.protocol != "http1":  # only when not the default: an http1 sidecar is unchanged
        args += ["--upstream-protocol", gate.protocol]
    if gate.max_connections is not None:
        args += ["--max-connections", str(gate.max_connections)]
    ready = Probe(http=HTTPGet(path="/ready", port=listen), period_seconds=1, failure_threshold=1)
    return Container(
        name=gate_name(container.name),
        image=gate.image,
        role="sidecar",
        command=("python3", "-m", "asyncdeploy.gate"),
        args=tuple(args),
        env={GATE_TOKEN_ENV: token},
        checks=Checks(readiness=ready),
        image_pull_policy=container.image_pull_policy,
    )


def _gated(plan: WorkloadPlan, container: Container, gate: Gate, token: str) -> Container:
    query = f"propagation_wait={gate.propagation_seconds}s&timeout={_cut_after(plan)}s"
    return attrs.evolve(
        container,
        gate=None,
        pre_stop_http=HTTPGet(path=f"{DRAIN_PATH}?{query}&token={token}", port=gate.admin_port),
    )


def new_token() -> str:
    """A gate's admin token: 144 random bits, URL-safe (it rides in the hook's query)."""
    return secrets.token_urlsafe(18)


def expand_gates(plan: WorkloadPlan) -> WorkloadPlan:
    """The plan with every ``gate:`` replaced by its sidecar (unchanged without one)."""
    if not any(c.gate is not None for c in plan.containers):
        return plan
    containers: list[Container] = []
    for container in plan.containers:
        if container.gate is None:
            containers.append(container)
            continue
        token = new_token()
        containers.append(gate_sidecar(plan, container, container.gate, token))
        containers.append(_gated(plan, container, container.gate, token))
    return attrs.evolve(plan, containers=containers)
