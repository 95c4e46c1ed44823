"""The container-engine drivers: Docker and Podman on one Engine-API implementation.

The driver (``_api``) is a facade over one engine session (``_session``), which it hands to
its parts; nothing below imports the driver back, and only the session (and ``_address``, for
aiodocker's docker-context readers) touches aiodocker's private members. "pure": no engine
call, unit tests call it without an engine.

=================  ======================================================================
module             concern
=================  ======================================================================
``_api``           :class:`EngineAPIDriver`, the ``Driver`` facade over the parts below
``_session``       the engine session: client, error mapping, raw calls (and Podman's)
``_docker``        Docker: socket discovery (thin)
``_address``       an engine's URL and TLS: the docker CLI's order, contexts read by aiodocker
``_docker_config`` which docker context the environment names (no engine client)
``_podman``        Podman: socket discovery, and the list of its quirks (thin)
``_spec``          plan → Engine API create configs, pure
``_devices``       a container's accelerators → create fields, pure
``_libpod``        a create body → Podman's libpod ``SpecGenerator`` (CDI devices), pure
``_create``        create a workload, and roll back exactly what that create made
``_pull``          image pulls before any create, with progress events
``_auth``          registry credentials for pulls (``X-Registry-Auth``)
``_ready``         ``wait_ready``: every run container running and ready, or why not
``_netcheck``      HTTP and TCP checks and hooks sent from here to a workload's address
``_state``         list entries → snapshots and ``WorkloadStatus``, pure
``_history``       a workload's recorded engine events (``GET /events``), pure
``_unfinished``    what a dead deployer left (half-made, half-drained), pure
``_markers``       markers (a replace's lock): labelled volumes
``_ops``           the values a drain works on (refs, looks, a claim's answer), pure
``_container_ops`` :class:`EngineContainerOps`: the drain's ``ContainerOps`` over a session
``_drain/``        a container-engine drain: one deadline, one machine per workload; the
                   package's ``drain_workloads`` is the entry. Pure (no anyio, no engine
                   client): ``protocol`` (the core's words: timings, operations, answers,
                   commands), ``core`` (one workload's machine: observations in, commands
                   out; its claim and transitions), ``context`` (what its states share),
                   its states ``pipelines`` (the owner: hook, signal, exit per container),
                   ``follow`` (follow another delete, or take over), ``cleanup`` (kill,
                   remove, the pause last). I/O: ``loop`` (the one loop carrying the
                   commands), ``calls`` (``ContainerOps``, the engine calls a driver gives the
                   drain; retried calls, hooks, exit waits)
``_claim``         the claim record (Docker: a labelled volume; Podman: a file in the pause
                   container): who drains, since when, pure
``_claim_marks``   what a look shows of a drain: a status read with its drain's claim
``_exec``          a command run in a container, watched while it runs
``_coalesce``      one engine call for many concurrent callers (rounds)
``_looks``         the driver's looks (lists, volumes, images), shared by concurrent calls
``_exits``         container exits from one engine event stream per deployer
=================  ======================================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from asyncdeploy.drivers.engine._docker import DockerDriver as DockerDriver
    from asyncdeploy.drivers.engine._podman import PodmanDriver as PodmanDriver

__all__ = ["DockerDriver", "PodmanDriver"]


def __getattr__(name: str) -> Any:
    """The drivers load aiodocker: only when one is asked for (the drain's pure parts and
    :mod:`asyncdeploy.testing`'s fakes import this package without an engine client)."""
    if name == "DockerDriver":
        from asyncdeploy.drivers.engine._docker import DockerDriver

        return DockerDriver
    if name == "PodmanDriver":
        from asyncdeploy.drivers.engine._podman import PodmanDriver

        return PodmanDriver
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
