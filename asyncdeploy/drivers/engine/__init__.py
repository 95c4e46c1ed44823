"""The container-engine drivers: Docker and Podman on one Engine-API implementation.

=============  ===========================================================================
module         concern
=============  ===========================================================================
``_api``       :class:`EngineAPIDriver`, the ``Driver`` contract on aiodocker
``_spec``      plan → Engine API create configs, pure
``_create``    create a workload, and roll back exactly what that create made
``_state``     list entries → snapshots and ``WorkloadStatus``, pure
``_drain``     the one deadline, the order and the events of a container-engine drain
``_docker``    socket discovery and Docker specifics (thin)
``_podman``    socket discovery and Podman's quirks, each with a test (thin)
=============  ===========================================================================
"""

from __future__ import annotations

from asyncdeploy.drivers.engine._docker import DockerDriver
from asyncdeploy.drivers.engine._podman import PodmanDriver

__all__ = ["DockerDriver", "PodmanDriver"]
