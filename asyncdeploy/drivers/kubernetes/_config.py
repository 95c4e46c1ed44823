"""Where the cluster is: an explicit ``Configuration`` from a kubeconfig or the in-cluster account.

The order: the ``kubeconfig`` argument, else ``KUBECONFIG`` (a ``:``-separated list, merged as
kubectl does), else ``~/.kube/config`` if it exists, else the in-cluster service account (when
``KUBERNETES_SERVICE_HOST`` is set). The namespace: the argument, else the kubeconfig context's,
else the service account's, else ``default``. Nothing is stored in kubernetes-asyncio's global
default configuration, and the kubeconfig file is never written back.
"""

from __future__ import annotations

import os

import anyio
import attrs

from asyncdeploy._errors import EngineUnavailable
from asyncdeploy.drivers.kubernetes._errors import ENGINE, map_errors
from asyncdeploy.drivers.kubernetes._library import (
    Configuration,
    load_incluster_config,
    load_kube_config,
)

__all__ = ["SERVICE_ACCOUNT_NAMESPACE", "ClusterConfig", "kubeconfig_path", "load_cluster_config"]

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@attrs.frozen
class ClusterConfig:
    configuration: Configuration
    namespace: str
    source: str  # the kubeconfig path(s), or "in-cluster"


async def kubeconfig_path(kubeconfig: str | None) -> str | None:
    """The kubeconfig to read, or None when there is none (then: in-cluster)."""
    if kubeconfig:
        return kubeconfig
    if env := os.environ.get("KUBECONFIG"):
        return env
    default = await anyio.Path.home() / ".kube" / "config"
    return str(default) if await default.is_file() else None


async def _any_file(paths: str) -> bool:
    for path in filter(None, paths.split(os.pathsep)):
        if await (await anyio.Path(path).expanduser()).is_file():
            return True
    return False


async def load_cluster_config(
    *, kubeconfig: str | None = None, context: str | None = None, namespace: str | None = None
) -> ClusterConfig:
    """Raise ``EngineUnavailable`` when nothing says where a cluster is, or it cannot be read."""
    configuration = Configuration()
    path = await kubeconfig_path(kubeconfig)
    if path is not None:
        if not await _any_file(path):
            raise EngineUnavailable(f"kubeconfig {path} does not exist", engine=ENGINE)
        try:
            with map_errors(f"read kubeconfig {path}"):
                loader = await load_kube_config(
                    config_file=path,
                    context=context,
                    client_configuration=configuration,
                    persist_config=False,
                )
        except EngineUnavailable:
            raise
        except Exception as exc:  # kubeconfig parsing raises anything from KeyError to YAMLError
            raise EngineUnavailable(f"read kubeconfig {path}: {exc!r}", engine=ENGINE) from exc
        current = loader.current_context or {}
        namespace = namespace or (current.get("context") or {}).get("namespace")
        return ClusterConfig(configuration, namespace or "default", path)
    if not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise EngineUnavailable(
            "no kubeconfig (KUBECONFIG, ~/.kube/config) and not running inside a cluster",
            engine=ENGINE,
        )
    with map_errors("load the in-cluster service account"):
        load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    if namespace is None:
        account = anyio.Path(SERVICE_ACCOUNT_NAMESPACE)
        if await account.is_file():
            namespace = (await account.read_text()).strip()
    return ClusterConfig(configuration, namespace or "default", "in-cluster")
