"""The Kubernetes driver: one Pod per workload, on kubernetes-asyncio.

===============  =========================================================================
module           concern
===============  =========================================================================
``_driver``      :class:`KubernetesDriver`, the ``Driver`` contract: connect, apply, get, ...
``_manifest``    plan → Pod (and Service) manifest, pure (unit-testable without a cluster)
``_status``      live Pod → ``WorkloadStatus``, readiness, masked inspect output, pure
``_drain``       the drain with its I/O: one list, a uid-guarded delete per Pod (retried),
                 the watches of the Pods and of their Events, the kill of a cancelled drain,
                 the namespaces of ``-A`` side by side, a plan's Service after its last Pod
``_pod_states``  what those watches show → the drain events and summaries, pure
``_traffic``     the EndpointSlices of the Services routing to a Pod → ``TrafficLeft``;
                 one Service's endpoints followed as kube-proxy does
``_ready``       ``wait_ready``: the Pod Ready, every container without a probe settled
                 (the settle window read past the kubelet's report delay)
``_kubelet``     the kubelet's Events and start-up reasons (ErrImagePull, ...), pure
``_watch``       following Pods (or Events, slices) through a watch resumed from a fresh list
``_api``         the calls, JSON in and out, through one explicit ``ApiClient``
``_config``      kubeconfig / in-cluster configuration and the namespace
``_errors``      API statuses and transport failures → asyncdeploy's errors
===============  =========================================================================

The names match the engine wing's: there too ``_drain`` is the drain with its I/O, and both
hold a :class:`~asyncdeploy.drivers._books.DrainBooks` per workload (a field, not a base class)
and write every event's context, error line and summary through it.
"""

from __future__ import annotations

from asyncdeploy.drivers.kubernetes._driver import KubernetesDriver
from asyncdeploy.drivers.kubernetes._manifest import pod_manifest, service_name
from asyncdeploy.drivers.kubernetes._traffic import EndpointState, follow_service

__all__ = ["EndpointState", "KubernetesDriver", "follow_service", "pod_manifest", "service_name"]
