"""A task group's error as its caller should see it: the one real error, unwrapped."""

from __future__ import annotations

import anyio

__all__ = ["lone_error"]


def lone_error(group: BaseExceptionGroup) -> BaseException:
    """The one real error of a task group (e.g. ``WorkloadNotFound`` before anything was
    touched), however deeply grouped, its siblings' cancellations aside; the group itself when
    there are several."""
    errors = [e for e in group.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())]
    if len(errors) == 1:
        if isinstance(errors[0], BaseExceptionGroup):
            return lone_error(errors[0])
        return errors[0]
    return group
