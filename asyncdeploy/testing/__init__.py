"""Test your own control plane without an engine, as httpx's ``MockTransport`` tests a client
without a server.

:class:`FakeDriver` is a whole ``Driver`` in memory: ``Deployer(FakeDriver())`` creates, lists,
waits for and drains workloads whose containers are fakes, and its drain is asyncdeploy's real
engine drain (the same order, one deadline, the same events and summaries as on Docker or
Podman). Run it on a virtual clock (looptime, or trio's ``MockClock`` where your code is
backend-neutral) and a 30 s grace costs nothing::

    from asyncdeploy import Container, Deployer, WorkloadPlan
    from asyncdeploy.testing import FakeDriver, refused

    driver = FakeDriver()
    deployer = Deployer(driver)
    await deployer.create(plan)
    driver.script("llm", "server", drain=12.0)  # 12 s from SIGTERM to its exit 0
    driver.script("llm", "sidecar", ignores_term=True)  # killed at the deadline
    driver.engine("llm").fail("remove", "server", refused("remove", "server"))
    summary = await deployer.delete("llm")  # DrainError here: "remove server: refused"

:class:`FakeOps` is the engine's side alone (the calls a drain makes, on fake containers, with
faults on demand: ``fail``, ``down``, ``lose_answer``, ``hang``, a slow or lost exit stream),
what asyncdeploy's own drain tests run on. Neither imports an engine client.
"""

# (no ``from __future__ import annotations``: it would bind ``annotations`` here, a name the
# package would seem to offer; nothing here is annotated)
from asyncdeploy.testing._driver import FakeDriver
from asyncdeploy.testing._ops import ENGINE, Box, FakeOps, refused

__all__ = ["ENGINE", "Box", "FakeDriver", "FakeOps", "refused"]
