"""The Kubernetes driver's edge: API statuses and transport failures → asyncdeploy errors.

=====================================  =======================================================
what the driver meets                  what it raises
=====================================  =======================================================
HTTP 404 (a Status ``NotFound``)       ``WorkloadNotFound``
HTTP 409 (``AlreadyExists``/Conflict)  ``WorkloadConflict``
HTTP 429, 5xx                          ``EngineAPIError`` (:class:`RetryLater` when the answer
                                       says when to try again: ``Retry-After`` or the Status's
                                       ``details.retryAfterSeconds``)
any other HTTP error (401, 403, 405,   ``EngineAPIError`` carrying the status, with the
410, 422, 500, ...)                    Status ``message`` (the causes, for a 422)
a refused / dropped connection, TLS    ``EngineUnavailable``
a request that does not answer in time ``EngineTimeout``
an unusable kubeconfig                 ``EngineUnavailable``
=====================================  =======================================================

Every translation is ``raise ... from exc``; nothing from kubernetes-asyncio or aiohttp crosses
the driver's surface.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import aiohttp

from asyncdeploy._errors import (
    ENGINE_FAILURES,
    EngineAPIError,
    EngineFailure,
    EngineTimeout,
    EngineUnavailable,
    WorkloadConflict,
    WorkloadNotFound,
)
from asyncdeploy.drivers.kubernetes._library import ApiException, ConfigException

__all__ = ["ENGINE", "RetryLater", "map_errors", "retry_after", "status_error", "status_message"]

ENGINE = "kubernetes"


def status_message(body: bytes | str | Mapping[str, Any] | None) -> str:
    """The ``message`` of a Kubernetes Status body, or the body itself when it is not one."""
    if body is None:
        return ""
    data: Any = body
    if isinstance(body, bytes | str):
        text = body.decode(errors="replace") if isinstance(body, bytes) else body
        try:
            data = json.loads(text)
        except ValueError:
            return text.strip()[:500]
    if isinstance(data, Mapping):
        message = data.get("message") or data.get("reason")
        if message:
            return str(message)
    return str(data)[:500]


class RetryLater(EngineAPIError):
    """A 429 or 5xx that says how long to wait before trying again (seconds)."""

    def __init__(self, message: str, *, engine: str, status: int, after: float) -> None:
        super().__init__(message, engine=engine, status=status)
        self.after = after


def retry_after(header: str | None, body: bytes | str | Mapping[str, Any] | None) -> float | None:
    """The wait an answer asks for: ``Retry-After`` in seconds (the API server never sends an
    HTTP date), else the Status's ``details.retryAfterSeconds``; None when it names none."""
    if header is not None:
        try:
            return max(0.0, float(header))
        except ValueError:
            pass
    data: Any = body
    if isinstance(body, bytes | str):
        try:
            data = json.loads(body)
        except ValueError:
            return None
    if isinstance(data, Mapping):
        seconds = (data.get("details") or {}).get("retryAfterSeconds")
        if isinstance(seconds, int | float) and not isinstance(seconds, bool):
            return max(0.0, float(seconds))
    return None


def status_error(
    status: int,
    body: bytes | str | Mapping[str, Any] | None,
    what: str,
    *,
    retry_after_header: str | None = None,
) -> EngineFailure:
    """The asyncdeploy error for an HTTP error answer to ``what``."""
    detail = status_message(body)
    message = f"{what}: {detail}" if detail else f"{what}: HTTP {status}"
    if status == 404:
        return WorkloadNotFound(message, engine=ENGINE, status=status)
    if status == 409:
        return WorkloadConflict(message, engine=ENGINE, status=status)
    if status == 429 or status >= 500:
        after = retry_after(retry_after_header, body)
        if after is not None:
            return RetryLater(message, engine=ENGINE, status=status, after=after)
    return EngineAPIError(message, engine=ENGINE, status=status)


@contextmanager
def map_errors(what: str) -> Iterator[None]:
    """Translate kubernetes-asyncio and aiohttp errors raised inside into asyncdeploy's."""
    try:
        yield
    except ENGINE_FAILURES:
        raise
    except ApiException as exc:
        headers: Mapping[str, str] = exc.headers or {}
        header = headers.get("Retry-After")
        raise status_error(exc.status or 0, exc.body, what, retry_after_header=header) from exc
    except aiohttp.WSServerHandshakeError as exc:
        # exec: the API server refused the upgrade (no such Pod, container not running, RBAC).
        raise status_error(exc.status, exc.message, what) from exc
    except (aiohttp.ServerTimeoutError, TimeoutError) as exc:
        raise EngineTimeout(f"{what}: no answer in time", engine=ENGINE) from exc
    except (aiohttp.ClientError, OSError) as exc:
        # Refused or dropped connections, TLS failures, a stream cut short.
        raise EngineUnavailable(f"{what}: {str(exc) or type(exc).__name__}", engine=ENGINE) from exc
    except ConfigException as exc:
        raise EngineUnavailable(f"{what}: {exc}", engine=ENGINE) from exc
