"""The gate's admin port: the drain hook and the kit's control commands, off the data port.

Nothing a client can reach changes the gate's state: the data port answers the health paths
and the metrics (read-only) and relays everything else; every control lives here, on a port
no port mapping publishes and no Service selects, reached by the deployer from its host
(Docker, Podman) or by the kubelet's preStop ``httpGet`` from the node (Kubernetes). Both can
reach a Pod's or container's address, and so can its neighbours, so every request must carry
the workload's admin token (``?token=`` or an ``X-Asyncdeploy-Token`` header); without a
configured token the port listens on loopback only (the gate run by hand).

Paths (GET or POST; any other answer is 403 without the token, 404 for an unknown path):

- ``/-/drain?propagation_wait=10s&timeout=25s``: the preStop hook. Starts the kit's drain and
  answers once its propagation window closed and nothing is in flight (200, the kit's
  statistics), or at ``timeout`` (504);
- ``/-/<command>?key=value...``: one command of the kit's control protocol
  (:func:`asyncdeploy.workload.control.execute_command`: ``status``, ``drain``, and whatever
  the kit learns), its JSON reply as the body (200 when ``ok``, else 400).
"""

from __future__ import annotations

import hmac
import re
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol
from urllib.parse import parse_qsl

from asyncdeploy.workload import DrainController, parse_duration
from asyncdeploy.workload.control import execute_command

from ._client import ClientConnection, LocalAnswer
from ._exchange import Exchange
from ._limits import Limits
from ._upstream import UpstreamConnection

__all__ = ["CONTROL_PREFIX", "DRAIN_PATH", "AdminHost"]

CONTROL_PREFIX = b"/-/"
DRAIN_PATH = b"/-/drain"
TOKEN_HEADER = b"x-asyncdeploy-token"
_VERB = re.compile(rb"[a-z][a-z0-9_-]{0,31}")


class GateAnswers(Protocol):
    """What the admin port needs of the gate (``_server._Gate``)."""

    @property
    def controller(self) -> DrainController: ...
    def answer(
        self, status: int, body: object, *, close: bool = False, method: bytes = b"GET"
    ) -> bytes: ...
    def refusal(self, *, close: bool) -> bytes: ...
    def spawn(self, function: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None: ...


class AdminHost:
    """What the admin port's connections answer (``_host.RelayHost``): only local answers."""

    def __init__(self, gate: GateAnswers, token: str | None, limits: Limits) -> None:
        self._gate = gate
        self._token = token.encode() if token else None
        self.limits = limits
        self.connections: set[ClientConnection] = set()

    @property
    def controller(self) -> DrainController:
        return self._gate.controller

    def local(self, head: Exchange) -> LocalAnswer:
        gate = self._gate
        close = not head.keep_alive
        if head.method not in (b"GET", b"POST", b"HEAD"):
            return self._closing(head, 405, {"error": "GET or POST"})
        query = parse_qsl(head.query.decode("latin-1"), keep_blank_values=True)
        if not self._authorized(head, query):
            return self._closing(head, 403, {"error": "no valid admin token"})
        arguments = [(k, v) for k, v in query if k != "token"]
        if head.path == DRAIN_PATH:
            return self._drain(head, dict(arguments))
        verb = head.path[len(CONTROL_PREFIX) :]
        if not head.path.startswith(CONTROL_PREFIX) or _VERB.fullmatch(verb) is None:
            return gate.answer(404, {"error": "not an admin path"}, close=close, method=head.method)
        command = " ".join([verb.decode(), *(f"{k}={v}" for k, v in arguments)])
        reply = execute_command(self.controller, command)
        status = 200 if reply.get("ok") else 400
        return gate.answer(status, reply, close=close, method=head.method)

    def _closing(self, exchange: Exchange, status: int, body: object) -> bytes:
        exchange.keep_alive = False  # the connection ends with this answer
        return self._gate.answer(status, body, close=True, method=exchange.method)

    def _authorized(self, head: Exchange, query: list[tuple[str, str]]) -> bool:
        expected = self._token
        if expected is None:
            return True  # loopback only: see serve_gate
        offered = [v.encode("latin-1") for k, v in query if k == "token"]
        offered += [v for k, v in head.headers if k.lower() == TOKEN_HEADER]
        return any(hmac.compare_digest(expected, value) for value in offered)

    def _drain(self, head: Exchange, arguments: dict[str, str]) -> LocalAnswer:
        """The preStop hook: drain; answer once the window closed and nothing is in flight."""
        gate = self._gate
        try:
            wait = _seconds(arguments.get("propagation_wait"))
            timeout = _seconds(arguments.get("timeout"))
        except ValueError as exc:
            return self._closing(head, 400, {"error": str(exc)})
        controller = self.controller

        async def drain() -> bytes:
            started = time.monotonic()
            # The kit's own drain command: new requests are served through the propagation
            # window (at most ``wait``, this hook's bound), then refused; drained = the window
            # closed and nothing in flight.
            execute_command(controller, "drain" if wait is None else f"drain propagation={wait}")
            drained = await controller.wait_drained(timeout)
            report = {
                "drained": drained,
                "seconds": round(time.monotonic() - started, 3),
                "statistics": controller.statistics().to_dict(),
            }
            status = 200 if drained else 504
            return gate.answer(status, report, close=not head.keep_alive, method=head.method)

        return drain

    # --- the rest of ``_host.RelayHost``: never relayed, so never an upstream ---------------------
    def refusal(self, *, close: bool) -> bytes:
        return self._gate.refusal(close=close)

    def spawn(self, function: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        self._gate.spawn(function, *args)

    async def connect_upstream(self) -> UpstreamConnection:
        raise OSError("the admin port relays nothing")


def _seconds(value: str | None) -> float | None:
    return None if value is None else parse_duration(value)
