"""The Kubernetes driver: one Pod per workload, on kubernetes-asyncio.

=============  ===========================================================================
module         concern
=============  ===========================================================================
``_driver``    :class:`KubernetesDriver`, the ``Driver`` contract: connect, apply, get, ...
``_manifest``  plan → Pod manifest, pure (unit-testable without a cluster)
``_status``    live Pod → ``WorkloadStatus``, readiness, masked inspect output, pure
``_delete``    one list, one delete, the watches of the Pods and of their Events
``_drain``     what those show → the drain events and summaries, pure
``_kubelet``   the kubelet's Events and start-up reasons (ErrImagePull, ...), pure
``_watch``     following Pods (or Events) through a watch resumed from a fresh list
``_api``       the Pod calls, JSON in and out, through one explicit ``ApiClient``
``_config``    kubeconfig / in-cluster configuration and the namespace
``_errors``    API statuses and transport failures → asyncdeploy's errors
=============  ===========================================================================
"""

from __future__ import annotations

from asyncdeploy.drivers.kubernetes._driver import KubernetesDriver
from asyncdeploy.drivers.kubernetes._manifest import pod_manifest

__all__ = ["KubernetesDriver", "pod_manifest"]
