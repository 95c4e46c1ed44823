"""Image pull events: what ``create`` reports while it pulls, before it creates any container.

Every event carries the ``workload`` and ``image`` it belongs to and ``elapsed``, the seconds
since that workload's pulls started. An image is pulled once per create, however many containers
use it. Events never carry credentials: the registry is named, the user and password are not.
"""

from __future__ import annotations

import attrs

__all__ = ["PullEvent", "PullFailed", "PullFinished", "PullProgress", "PullStarted"]


@attrs.frozen(kw_only=True)
class PullStarted:
    """The engine began pulling ``image`` from ``registry`` (``docker.io`` for Docker Hub)."""

    workload: str
    elapsed: float
    image: str
    registry: str
    policy: str  # IfNotPresent (the image was absent) or Always


@attrs.frozen(kw_only=True)
class PullProgress:
    """Bytes and layers downloaded so far.

    ``bytes_total`` counts the layers whose size the engine has announced so far (Docker
    announces a layer's size when its download starts); it is None, like ``bytes_done``, when the
    engine reports no byte counts at all (Podman 4.3 reports finished layers only).
    """

    workload: str
    elapsed: float
    image: str
    bytes_done: int | None
    bytes_total: int | None
    layers_done: int
    layers_total: int


@attrs.frozen(kw_only=True)
class PullFinished:
    """``image`` is on the engine; ``digest`` is its registry digest (``sha256:...``)."""

    workload: str
    elapsed: float
    image: str
    digest: str
    seconds: float


@attrs.frozen(kw_only=True)
class PullFailed:
    """The pull of ``image`` failed with the engine's or registry's ``reason``; nothing was created."""

    workload: str
    elapsed: float
    image: str
    reason: str


PullEvent = PullStarted | PullProgress | PullFinished | PullFailed
