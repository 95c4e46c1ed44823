"""Which docker context the environment names, as the docker CLI decides it; no engine client.

The docker CLI's order (``cli/command/cli.go``, ``resolveContextName``): ``--context``, then
``-H`` / ``DOCKER_HOST`` (the ``default`` context: that address), then ``DOCKER_CONTEXT``,
then ``currentContext`` of ``config.json`` (``docker context use``). ``default`` is no
context: the address variable or the local socket. The engine choice reads this without
loading aiodocker; reading a context's endpoint and TLS material is aiodocker's (``_address``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

__all__ = ["DEFAULT_CONTEXT", "config_dir", "current_context"]

DEFAULT_CONTEXT = "default"


def config_dir(environ: Mapping[str, str]) -> Path:
    """The docker CLI's configuration directory: ``DOCKER_CONFIG``, else ``~/.docker``."""
    named = environ.get("DOCKER_CONFIG")
    return Path(named) if named else Path.home() / ".docker"


def current_context(environ: Mapping[str, str]) -> str | None:
    """The docker context the environment names (``DOCKER_CONTEXT``, else ``currentContext``
    of ``config.json``); None for none or ``default``, and whenever ``DOCKER_HOST`` is set
    (which the docker CLI puts first). Reads one small file: call it off the event loop."""
    if environ.get("DOCKER_HOST"):
        return None
    name = environ.get("DOCKER_CONTEXT")
    if not name:
        try:
            config = json.loads((config_dir(environ) / "config.json").read_bytes())
        except (OSError, ValueError):
            return None  # no configuration, or one the docker CLI would refuse too
        name = config.get("currentContext") if isinstance(config, dict) else None
    return None if not name or name == DEFAULT_CONTEXT else str(name)
