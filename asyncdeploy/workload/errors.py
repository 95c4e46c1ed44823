"""Errors of the workload drain kit, under the package root :class:`~asyncdeploy._errors.AsyncDeployError`.

::

    AsyncDeployError
    └── WorkloadError                   raised by asyncdeploy.workload
        └── ControlSocketError          the control socket cannot be served, reached or understood
            └── ControlSocketInUse      another live server already listens on the path
"""

from __future__ import annotations

from asyncdeploy._errors import AsyncDeployError

__all__ = ["ControlSocketError", "ControlSocketInUse", "WorkloadError"]


class WorkloadError(AsyncDeployError):
    """Root of the drain kit's errors."""


class ControlSocketError(WorkloadError):
    """``path`` names the socket, ``message`` says what went wrong."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"control socket {path}: {message}")
        self.path = path
        self.message = message


class ControlSocketInUse(ControlSocketError):
    """Another live server already listens on the path."""
