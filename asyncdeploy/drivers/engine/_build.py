"""Building an image on Docker or Podman from a tar build context (``POST /build``).

Both engines take the context as the request body and answer with newline-delimited JSON:
``{"stream": "..."}`` lines of the build's output and, when it fails, ``{"error": ...}`` (Docker
may also refuse up front with an HTTP error). ``RUN`` steps get no network (``networkmode=none``):
everything an image needs is in its context, so a build never reaches a registry for it (only the
``FROM`` base, when the engine lacks it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import aiodocker
import aiohttp

from asyncdeploy._errors import CreateError, WorkloadNotFound
from asyncdeploy.drivers.engine._session import EngineSession

__all__ = ["build_image", "image_labels"]

_LAST_LINES = 20


async def image_labels(session: EngineSession, image: str) -> Mapping[str, str] | None:
    """The labels of a local image, None when the engine has no such image."""
    try:
        with session.errors(f"inspect image {image}"):
            details = await session.inspect_image(image)
    except WorkloadNotFound:
        return None
    return dict((details.get("Config") or {}).get("Labels") or {})


async def build_image(
    session: EngineSession,
    context: bytes,
    tag: str,
    *,
    labels: Mapping[str, str],
    on_line: Callable[[str], None] | None = None,
) -> None:
    """Build ``context`` (a tar holding a ``Dockerfile``) as ``tag``; the
    build's last lines when it fails (``CreateError``)."""
    params = {
        "t": tag,
        "rm": "1",
        "forcerm": "1",
        "networkmode": "none",
        "labels": json.dumps(dict(labels)),
    }
    lines: list[str] = []
    endless = aiohttp.ClientTimeout(total=None, sock_read=None)  # a build takes what it takes
    with session.errors(f"build {tag}"):
        try:
            async with session.query(
                "build",
                "POST",
                params=params,
                data=context,
                headers={"content-type": "application/x-tar"},
                timeout=endless,
            ) as response:
                async for raw in response.content:
                    message = _json_line(raw)
                    error = message.get("error") or (message.get("errorDetail") or {}).get(
                        "message"
                    )
                    if error:
                        raise _failed(session, tag, [*lines, str(error)])
                    text = str(message.get("stream") or "").rstrip("\n")
                    for line in filter(str.strip, text.splitlines()):
                        lines.append(line)
                        if on_line is not None:
                            on_line(line)
        except aiodocker.DockerError as exc:
            if exc.status == 900:  # the engine went away: session.errors says so
                raise
            raise _failed(session, tag, [*lines, str(exc.message)]) from None


def _failed(session: EngineSession, tag: str, lines: list[str]) -> CreateError:
    tail = "\n".join(lines[-_LAST_LINES:])
    return CreateError(f"building {tag} on the {session.engine} engine failed:\n{tail}")


def _json_line(line: bytes) -> Mapping[str, Any]:
    try:
        item = json.loads(line)
    except ValueError:
        return {}
    return item if isinstance(item, dict) else {}
