"""kubernetes-asyncio, the parts the driver uses, loaded without its package roots' imports.

Importing any part of kubernetes-asyncio runs its package roots (``kubernetes_asyncio``,
``.client``, ``.client.models``), which import every API group (66 modules) and every generated
model (768 modules): about 0.3 s of CPU at every start, for classes the driver never uses — it
speaks JSON through the library's ``ApiClient`` (:mod:`._api`) and reads kubeconfigs with the
library's loader (:mod:`._config`). So when the library is not loaded yet, this module registers
those three package modules without running their ``__init__`` and imports the submodules the
driver uses. Each deferred package is the real module object: its ``__init__`` runs, in place,
the first time a name it does not have yet is asked of it (PEP 562 ``__getattr__``). Code that
uses more of the library later sees all of it: ``from kubernetes_asyncio.client import
CoreV1Api`` runs the package's ``__init__`` first, and the classes loaded here are the ones it
re-exports. When the library was loaded already, nothing is deferred.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from typing import Any

__all__ = [
    "ApiClient",
    "ApiException",
    "ConfigException",
    "Configuration",
    "api_client",
    "load_incluster_config",
    "load_kube_config",
    "websocket_client",
]

DEFERRED = ("kubernetes_asyncio", "kubernetes_asyncio.client", "kubernetes_asyncio.client.models")
"""The package roots whose ``__init__`` waits for the first name asked of them."""


def _defer(name: str) -> None:
    spec = importlib.util.find_spec(name)  # finds it (its parent is deferred already): runs nothing
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader
    lock = threading.RLock()
    running = threading.local()

    def __getattr__(attribute: str) -> Any:
        """A name the package does not have yet: a submodule is imported as such (as ``from
        package import submodule`` would); any other name runs the ``__init__`` (once)."""
        if not attribute.startswith("__") and importlib.util.find_spec(f"{name}.{attribute}"):
            return importlib.import_module(f"{name}.{attribute}")
        with lock:
            if module.__dict__.get("__getattr__") is __getattr__:
                if getattr(running, "now", False):  # asked while the __init__ runs: not there yet
                    raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
                running.now = True
                try:
                    loader.exec_module(module)
                finally:
                    running.now = False
                del module.__dict__["__getattr__"]  # an ordinary module from now on
        try:
            return module.__dict__[attribute]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}") from None

    module.__dict__["__getattr__"] = __getattr__
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def _provide(package: str, **names: Any) -> None:
    """Put on a deferred package what the library's own modules import from it."""
    module = sys.modules[package]
    if "__getattr__" in module.__dict__:
        for key, value in names.items():
            module.__dict__.setdefault(key, value)


if "kubernetes_asyncio" not in sys.modules:
    for _name in DEFERRED:
        _defer(_name)

from kubernetes_asyncio.client.api_client import ApiClient
from kubernetes_asyncio.client.configuration import Configuration
from kubernetes_asyncio.client.exceptions import ApiException

# the kubeconfig loader imports these from the client package's root
_provide("kubernetes_asyncio.client", ApiClient=ApiClient, Configuration=Configuration)

from kubernetes_asyncio.config import (
    ConfigException,
    load_incluster_config,
    load_kube_config,
)


def websocket_client(configuration: Configuration) -> ApiClient:
    """The library's websocket client (for exec), imported on first use."""
    from kubernetes_asyncio.stream import WsApiClient

    client: ApiClient = WsApiClient(configuration)
    return client


def api_client(configuration: Configuration) -> ApiClient:
    """The library's client, the environment's proxy for the API server looked up once.

    Its aiohttp session trusts the environment (``HTTPS_PROXY``, ``NO_PROXY``, as kubectl does),
    which aiohttp reads in a worker thread on every request; here it is read once, at connect,
    and given to the client as its proxy (or none), and the session no longer looks again."""
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    if configuration.proxy is None and configuration.host:
        try:
            proxy, auth = get_env_proxy_for_url(URL(configuration.host))
        except LookupError:
            pass  # no proxy for the API server
        else:
            configuration.proxy = str(proxy)
            if auth is not None:
                configuration.proxy_headers = {"Proxy-Authorization": auth.encode()}
    client: ApiClient = ApiClient(configuration)
    client.rest_client.pool_manager._trust_env = False  # looked up above, once
    return client
