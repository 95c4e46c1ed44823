"""Where a container's propagation window falls in its drain, and how long it is at most.

The window is the time a draining server goes on taking new requests so that the balancers in
front notice it leaving (their probes fail) before it stops: the drain gate's and the kit's
``drain`` command's ``--propagation-wait`` run it inside the ``pre_stop`` hook, the built-in
demo server after its stop signal. ``lint``'s budget counts it, and a delete's live view names
it while it runs (the engine drivers record it on the container). Pure.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import parse_qs, urlsplit

import attrs

from asyncdeploy.builtin_images import demo_window
from asyncdeploy.durations import parse_duration
from asyncdeploy.plan import Container
from asyncdeploy.plan.presets import flag_seconds

__all__ = ["Propagation", "propagation"]


@attrs.frozen(kw_only=True)
class Propagation:
    """A container's propagation window: at most ``seconds`` (less once the balancers' probes
    show the drain), ``during`` its ``pre_stop`` hook or after its stop ``signal``."""

    seconds: float
    during: Literal["pre_stop", "signal"]
    source: str


def propagation(container: Container) -> Propagation | None:
    """The window ``container``'s drain holds, as its plan says it (before or after the gate's
    expansion into a sidecar and a ``pre_stop_http`` hook); None when it holds none."""
    if container.gate is not None:
        seconds = float(container.gate.propagation_seconds)
        return Propagation(seconds=seconds, during="pre_stop", source="the gate's window")
    wait = flag_seconds(container.pre_stop or (), "--propagation-wait")
    if wait is not None:
        return Propagation(seconds=wait, during="pre_stop", source="pre_stop --propagation-wait")
    if container.pre_stop_http is not None:  # the gate's drain hook, once expanded
        query = parse_qs(urlsplit(container.pre_stop_http.path).query)
        if "propagation_wait" in query:
            seconds = parse_duration(query["propagation_wait"][0])
            return Propagation(seconds=seconds, during="pre_stop", source="the gate's window")
    argv = [*(container.command or ()), *(container.args or ())]
    window = demo_window(container.image, argv)
    if window is not None:
        return Propagation(
            seconds=window,
            during="signal",
            source="the demo image's own (--propagation-window)",
        )
    return None
