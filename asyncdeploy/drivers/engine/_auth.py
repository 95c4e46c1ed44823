"""Registry credentials for pulls on Docker and Podman, sent as the ``X-Registry-Auth`` header.

Where they are looked up, first match wins, for the registry named in the image reference:

1. the plan's ``registry_auth`` entry for that registry (its ``auth_file``);
2. on Podman: ``$REGISTRY_AUTH_FILE``, then ``$XDG_RUNTIME_DIR/containers/auth.json``;
3. the Docker config: ``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``.

Each file is read for its ``auths`` entries: ``auth`` (base64 of ``user:password``), or
``username`` and ``password``, or ``identitytoken``. Credential helpers (``credsStore``,
``credHelpers``) are not run. Secrets live only in :class:`Credentials`, whose ``repr`` hides
them, and in the header; no message ever quotes a file's content.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs

from asyncdeploy._errors import CreateError
from asyncdeploy.plan import RegistryAuth

__all__ = ["DOCKER_HUB", "Credentials", "auth_header", "find_credentials", "registry_of"]

DOCKER_HUB = "docker.io"
_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}


@attrs.frozen(kw_only=True)
class Credentials:
    registry: str
    source: str  # the file they came from, for messages
    username: str = attrs.field(default="", repr=False)
    password: str = attrs.field(default="", repr=False)
    identity_token: str = attrs.field(default="", repr=False)


def registry_of(image: str) -> str:
    """The registry host of an image reference, as Docker reads it (``docker.io`` when none)."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return _normal(first)
    return DOCKER_HUB


def _normal(registry: str) -> str:
    """``https://index.docker.io/v1/`` → ``docker.io``; ``http://host:5000/`` → ``host:5000``."""
    host = registry.split("://", 1)[-1].split("/", 1)[0].lower()
    return DOCKER_HUB if host in _HUB_ALIASES else host


def auth_header(credentials: Credentials) -> str:
    """The ``X-Registry-Auth`` value: URL-safe base64 of the JSON both engines read."""
    if credentials.identity_token:
        body: dict[str, str] = {"identitytoken": credentials.identity_token}
    else:
        body = {"username": credentials.username, "password": credentials.password}
    body["serveraddress"] = credentials.registry
    return base64.urlsafe_b64encode(json.dumps(body).encode()).decode()


def _default_files(engine: str) -> list[Path]:
    """The engine's usual credential files, in the order they are read; none must exist."""
    files: list[Path] = []
    if engine == "podman":
        if path := os.environ.get("REGISTRY_AUTH_FILE"):
            files.append(Path(path))
        if runtime := os.environ.get("XDG_RUNTIME_DIR"):
            files.append(Path(runtime, "containers", "auth.json"))
    docker_dir = os.environ.get("DOCKER_CONFIG")
    files.append(Path(docker_dir) if docker_dir else Path.home() / ".docker")
    files[-1] /= "config.json"
    return files


async def find_credentials(
    registry: str, *, engine: str, plan_auth: Sequence[RegistryAuth] = ()
) -> Credentials | None:
    """The credentials for ``registry``, or None to pull anonymously."""
    registry = _normal(registry)
    named = [a for a in plan_auth if _normal(a.registry) == registry]
    files = [(Path(a.auth_file), True) for a in named]
    files += [(path, False) for path in _default_files(engine)]
    for path, required in files:
        auths = await _read_auths(path, required=required)
        for key, entry in auths.items():
            if _normal(key) == registry and isinstance(entry, Mapping):
                return _from_entry(registry, entry, str(path))
        if required:
            raise CreateError(
                f"registry_auth for {registry}: {path} has no auths entry for {registry}"
            )
    return None


async def _read_auths(path: Path, *, required: bool) -> Mapping[str, Any]:
    try:
        text = await anyio.Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        if not required:
            return {}
        raise CreateError(f"cannot read the registry auth file {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except ValueError:
        # never quote the content: it holds secrets
        raise CreateError(f"the registry auth file {path} is not valid JSON") from None
    auths = data.get("auths") if isinstance(data, Mapping) else None
    return auths if isinstance(auths, Mapping) else {}


def _from_entry(registry: str, entry: Mapping[str, Any], source: str) -> Credentials:
    if token := entry.get("identitytoken"):
        return Credentials(registry=registry, source=source, identity_token=str(token))
    if encoded := entry.get("auth"):
        try:
            user, sep, password = base64.b64decode(str(encoded)).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            sep = ""
        if not sep:
            raise CreateError(
                f"the auths entry for {registry} in {source} is not base64 of user:password"
            )
        return Credentials(registry=registry, source=source, username=user, password=password)
    return Credentials(
        registry=registry,
        source=source,
        username=str(entry.get("username", "")),
        password=str(entry.get("password", "")),
    )
