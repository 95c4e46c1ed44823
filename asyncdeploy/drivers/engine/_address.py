"""Where an engine is and how to speak to it: its URL and TLS material, as the docker CLI finds
them.

Docker (:func:`docker_address`), in the docker CLI's order: an address given (``--url``,
``url=``), a docker context named (``--docker-context``, ``docker_context=``), ``DOCKER_HOST``,
then ``DOCKER_CONTEXT`` or the current context of ``config.json`` (``docker context use``),
then the local socket. A ``tcp://`` address speaks TLS when ``DOCKER_TLS_VERIFY`` (verified
against ``ca.pem``) or ``DOCKER_TLS`` (unverified) is set, with ``ca.pem``, ``cert.pem`` and
``key.pem`` from ``DOCKER_CERT_PATH`` (else the docker configuration directory), each used when
it exists, as the docker CLI does; its port defaults to 2376 with TLS, 2375 without.

A context's endpoint and TLS material are read by aiodocker's own context support (the files
under ``~/.docker/contexts``), not by a copy of it here: this module, like ``_session``, calls
aiodocker's private context readers. ``ssh://`` is aiodocker's SSH transport (the ``ssh``
extra: asyncssh; it runs ``docker system dial-stdio`` on the remote host, so Docker only).

Everything here reads files: call it off the event loop.
"""

from __future__ import annotations

import importlib.util
import ssl
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import aiodocker
import attrs
from aiodocker.exceptions import DockerContextError

from asyncdeploy._errors import DriverNotInstalled
from asyncdeploy.drivers.engine._docker_config import DEFAULT_CONTEXT, config_dir, current_context

__all__ = ["ContextError", "EngineAddress", "docker_address", "plain_address"]

TLS_PORT, PLAIN_PORT = 2376, 2375  # the docker CLI's defaults for a tcp:// address without one
SCHEMES = ("unix", "tcp", "http", "https", "ssh")


class ContextError(ValueError):
    """A docker context that cannot be used (the message names it and where it was named)."""


@attrs.frozen
class EngineAddress:
    """An engine's URL as the client connects to it (``unix://``, ``http(s)://``, ``ssh://``),
    its TLS context, and what named it (for messages: ``docker context prod``)."""

    url: str
    tls: ssl.SSLContext | None = attrs.field(default=None, eq=False, repr=False)
    source: str = ""

    def __str__(self) -> str:
        return f"{self.url} ({self.source})" if self.source else self.url


def plain_address(url: str, *, engine: str) -> EngineAddress:
    """An address as given, without Docker's TLS variables or contexts (Podman's)."""
    if url.startswith("ssh://"):
        raise ValueError(
            f"{url}: Podman over ssh:// is not supported (the SSH transport runs `docker "
            "system dial-stdio` on the remote host); forward Podman's socket (ssh -L "
            "/tmp/podman.sock:/run/podman/podman.sock HOST) and name it as unix://"
        )
    _check_scheme(url, engine)
    if url.startswith("tcp://"):
        url = "http://" + url.removeprefix("tcp://")
    return EngineAddress(url)


def docker_address(
    url: str | None,
    context: str | None,
    *,
    environ: Mapping[str, str],
    discovered: str,
) -> EngineAddress:
    """The Docker engine's address (the module docstring's order). ``ValueError`` for an
    address or a context that cannot be used, saying why; ``DriverNotInstalled`` for
    ``ssh://`` without the ``ssh`` extra."""
    if url and context:
        raise ValueError(
            f"both an engine address ({url}) and a docker context ({context}): name one"
        )
    if url:
        return _tcp_tls(url, environ, source="")
    name = context if context and context != DEFAULT_CONTEXT else None
    if context is None:
        name = current_context(environ)
    if name is not None:
        source = f"docker context {name}"
        if context is None and environ.get("DOCKER_CONTEXT"):
            source += " from DOCKER_CONTEXT"
        elif context is None:
            source += f" from {config_dir(environ) / 'config.json'}"
        return _context_address(name, environ, source)
    if host := environ.get("DOCKER_HOST"):
        return _tcp_tls(host, environ, source="DOCKER_HOST")
    return EngineAddress(discovered)


def _context_address(name: str, environ: Mapping[str, str], source: str) -> EngineAddress:
    """A context's endpoint and TLS material, read by aiodocker."""
    if config_dir(environ).expanduser().resolve() != (Path.home() / ".docker").resolve():
        raise ContextError(
            f"docker context {name!r}: contexts are read from ~/.docker/contexts, but "
            f"DOCKER_CONFIG names {environ['DOCKER_CONFIG']}; set DOCKER_HOST (and "
            "DOCKER_TLS_VERIFY, DOCKER_CERT_PATH) to the context's endpoint instead"
        )
    try:
        endpoint = aiodocker.Docker._get_docker_context_endpoint(name)
        if endpoint is None:  # aiodocker's "default": no context
            raise DockerContextError("no such context", context_name=name)
        tls = aiodocker.Docker._create_context_ssl_context(endpoint, context_name=name)
    except DockerContextError as exc:
        if "not found" in exc.message or exc.message == "no such context":  # aiodocker's words
            raise ContextError(
                f"{source}: no docker context named {name!r} (`docker context ls` lists them)"
            ) from None
        raise ContextError(f"{source}: {exc.message}") from None
    try:
        _check_scheme(endpoint.host, "docker")
    except ValueError as exc:
        raise ContextError(f"{source}: {exc}") from None
    url = endpoint.host
    scheme, _, rest = url.partition("://")
    if scheme in ("tcp", "http", "https"):
        url = f"{'https' if tls is not None else 'http'}://{_with_port(rest, tls is not None)}"
    return EngineAddress(url, tls, source)


def _tcp_tls(url: str, environ: Mapping[str, str], *, source: str) -> EngineAddress:
    """A ``tcp://`` (or ``http(s)://``) address with the TLS that Docker's variables ask for."""
    _check_scheme(url, "docker")
    scheme, _, rest = url.partition("://")
    if scheme not in ("tcp", "http", "https"):
        return EngineAddress(url, source=source)
    verify = bool(environ.get("DOCKER_TLS_VERIFY"))
    if not (verify or environ.get("DOCKER_TLS") or scheme == "https"):
        return EngineAddress(f"http://{_with_port(rest, False)}", source=source)
    certs = Path(environ.get("DOCKER_CERT_PATH") or config_dir(environ))
    tls = _tls_context(certs, verify=verify or scheme == "https")
    return EngineAddress(f"https://{_with_port(rest, True)}", tls, source=source)


def _tls_context(certs: Path, *, verify: bool) -> ssl.SSLContext:
    """``ca.pem`` (else the system's roots), ``cert.pem`` and ``key.pem`` from ``certs``."""
    ca, cert, key = (certs / f for f in ("ca.pem", "cert.pem", "key.pem"))
    try:
        context = ssl.create_default_context(cafile=str(ca) if ca.exists() else None)
        if not verify:  # DOCKER_TLS without DOCKER_TLS_VERIFY: encrypted, not verified
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if cert.exists() and key.exists():
            context.load_cert_chain(certfile=str(cert), keyfile=str(key))
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(f"the TLS files in {certs} (DOCKER_CERT_PATH): {exc}") from None
    return context


def _with_port(rest: str, tls: bool) -> str:
    """``host[:port][/path]`` with the docker CLI's default port when it has none."""
    parts = urlsplit(f"//{rest}")
    if parts.port is not None or not parts.hostname:
        return rest
    return f"{parts.netloc}:{TLS_PORT if tls else PLAIN_PORT}{parts.path}"


def _check_scheme(url: str, engine: str) -> None:
    scheme, found, _ = url.partition("://")
    if not found or scheme not in SCHEMES:
        raise ValueError(
            f"{url!r} is not an engine address (unix://, tcp://, http://, https:// or ssh://)"
        )
    if scheme == "ssh" and importlib.util.find_spec("asyncssh") is None:
        raise DriverNotInstalled(engine, "ssh", "asyncssh")
