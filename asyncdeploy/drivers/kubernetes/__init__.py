"""The Kubernetes driver: one Pod per workload, on kubernetes-asyncio.

=============  ===========================================================================
module         concern
=============  ===========================================================================
``driver``     :class:`KubernetesDriver`, the ``Driver`` contract: connect, apply, get, ...
``manifest``   plan → Pod manifest, pure (unit-testable without a cluster)
``status``     live Pod → ``WorkloadStatus``, readiness, masked inspect output, pure
``drain``      delete + watch → the drain events and summaries
``watch``      following Pods through a watch resumed from a fresh list, never abandoned
``api``        the Pod calls, JSON in and out, through one explicit ``ApiClient``
``config``     kubeconfig / in-cluster configuration and the namespace
``errors``     API statuses and transport failures → asyncdeploy's errors
=============  ===========================================================================
"""

from __future__ import annotations

from asyncdeploy.drivers.kubernetes.driver import KubernetesDriver
from asyncdeploy.drivers.kubernetes.manifest import pod_manifest

__all__ = ["KubernetesDriver", "pod_manifest"]
