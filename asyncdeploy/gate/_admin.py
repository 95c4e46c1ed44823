"""The gate's admin port: the drain hook and the kit's control commands, off the data port.

Nothing a client can reach changes the gate's state: the data port answers the health paths
and the metrics (read-only) and relays everything else; every control lives here, on a port
no port mapping publishes and no Service selects, reached by the deployer from its host
(Docker, Podman) or by the kubelet's preStop ``httpGet`` from the node (Kubernetes). Both can
reach a Pod's or container's address, and so can its neighbours, so every request must carry
the workload's admin token (``?token=`` or an ``X-Asyncdeploy-Token`` header). HAProxy holds
the port: a request without the token is its 403 (the controller never sees it), and idle or
token-less connections cannot fill it (its cap is far above what the head timeout lets them
hold). The controller checks the token again (in constant time) on what HAProxy forwards.
Without a configured token the port listens on loopback only (the gate run by hand).

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
from typing import Protocol
from urllib.parse import parse_qsl

from asyncdeploy.workload import DrainController, parse_duration
from asyncdeploy.workload.control import execute_command

from ._local import LocalAnswer, Request

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
        self, status: int, body: object, *, close: bool = True, method: bytes = b"GET"
    ) -> bytes: ...
    async def wait_drained(self, timeout: float | None) -> bool: ...


class AdminHost:
    """What the admin port answers (HAProxy forwards it the requests that carry the token)."""

    def __init__(self, gate: GateAnswers, token: str | None) -> None:
        self._gate = gate
        self._token = token.encode() if token else None

    @property
    def controller(self) -> DrainController:
        return self._gate.controller

    def local(self, head: Request) -> LocalAnswer:
        gate = self._gate
        if head.method not in (b"GET", b"POST", b"HEAD"):
            return gate.answer(405, {"error": "GET or POST"}, method=head.method)
        query = parse_qsl(head.query.decode("latin-1"), keep_blank_values=True)
        if not self._authorized(head, query):
            return gate.answer(403, {"error": "no valid admin token"}, method=head.method)
        arguments = [(k, v) for k, v in query if k != "token"]
        if head.path == DRAIN_PATH:
            return self._drain(head, dict(arguments))
        verb = head.path[len(CONTROL_PREFIX) :]
        if not head.path.startswith(CONTROL_PREFIX) or _VERB.fullmatch(verb) is None:
            return gate.answer(404, {"error": "not an admin path"}, method=head.method)
        command = " ".join([verb.decode(), *(f"{k}={v}" for k, v in arguments)])
        reply = execute_command(self.controller, command)
        status = 200 if reply.get("ok") else 400
        return gate.answer(status, reply, method=head.method)

    def _authorized(self, head: Request, query: list[tuple[str, str]]) -> bool:
        expected = self._token
        if expected is None:
            return True  # loopback only: see serve_gate
        offered = [v.encode("latin-1") for k, v in query if k == "token"]
        offered += [v for k, v in head.headers if k.lower() == TOKEN_HEADER]
        return any(hmac.compare_digest(expected, value) for value in offered)

    def _drain(self, head: Request, arguments: dict[str, str]) -> LocalAnswer:
        """The preStop hook: drain; answer once the window closed and nothing is in flight."""
        gate = self._gate
        try:
            wait = _seconds(arguments.get("propagation_wait"))
            timeout = _seconds(arguments.get("timeout"))
        except ValueError as exc:
            return gate.answer(400, {"error": str(exc)}, method=head.method)
        controller = self.controller

        async def drain() -> bytes:
            started = time.monotonic()
            # The kit's own drain command: new requests are served through the propagation
            # window (at most ``wait``, this hook's bound), then refused; drained = the window
            # closed and nothing in flight (HAProxy's count, read after admission stopped).
            execute_command(controller, "drain" if wait is None else f"drain propagation={wait}")
            drained = await gate.wait_drained(timeout)
            report = {
                "drained": drained,
                "seconds": round(time.monotonic() - started, 3),
                "statistics": controller.statistics().to_dict(),
            }
            return gate.answer(200 if drained else 504, report, method=head.method)

        return drain


def _seconds(value: str | None) -> float | None:
    return None if value is None else parse_duration(value)
