"""The drain gate: a reverse proxy that gives an engine it cannot change the kit's drain.

It sits in the workload's network namespace in front of an unmodified inference server,
answers the kit's health paths itself (ready = the gate serving *and* the engine's own health
path answering), passes every other request through unbuffered (framed by llhttp), counts
in-flight work with the kit's state machine and drains before the engine is signalled (``GET
/-/drain`` on its admin port, with the workload's token: the engine container's preStop hook).
It imports only the kit (:mod:`asyncdeploy.workload`), never the deployer or the drivers.
``python3 -m asyncdeploy.gate --help`` runs it.
"""

from __future__ import annotations

from ._server import GateConfig, serve_gate

__all__ = ["GateConfig", "serve_gate"]
