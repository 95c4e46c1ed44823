"""Image pulls on Docker and Podman: every image a plan needs, once each, concurrently, before
any container is created (and before a replacement drains the workload it replaces).

Both engines pull through the Engine API's ``POST /images/create?fromImage=<repo>&tag=<tag>``
with an ``X-Registry-Auth`` header when credentials are found (:mod:`._auth`), and answer with
newline-delimited JSON progress. Docker reports bytes per layer (``Downloading`` with
``progressDetail.current`` / ``total``); Podman 4.3 reports only ``Pulling fs layer`` and
``Download complete`` per blob. Docker refuses a pull it cannot start with an HTTP error
(500 ``unauthorized: authentication required``, 404 ``manifest unknown``); Podman answers 200
and puts the error in the stream (``{"error": ...}``). The digest comes from inspecting the
pulled image (``RepoDigests``), the same on both engines.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiodocker
import aiohttp
import anyio
import attrs

from asyncdeploy._errors import AsyncDeployError, CreateError, EngineUnavailable, WorkloadNotFound
from asyncdeploy._events import Emit, PullFailed, PullFinished, PullProgress, PullStarted
from asyncdeploy.builtin_images import built_in, missing_message
from asyncdeploy.drivers.engine._auth import auth_header, find_credentials, registry_of
from asyncdeploy.drivers.engine._session import EngineSession
from asyncdeploy.plan import PullPolicy, WorkloadPlan

__all__ = ["ImagePuller", "LayerProgress", "images_to_pull", "reference_params"]

DEFAULT_POLICY: PullPolicy = "IfNotPresent"  # as `docker run` and compose's `missing`
_RANK = {"Never": 0, "IfNotPresent": 1, "Always": 2}
PROGRESS_INTERVAL = 0.2  # at most five progress events a second per image
_DONE = {"Download complete", "Verifying Checksum", "Extracting", "Pull complete", "Already exists"}
_UNAUTHORIZED = ("unauthorized", "authentication required", "no basic auth credentials")
_LAYER = {"Pulling fs layer", "Waiting", "Downloading", "Retrying", *_DONE}


def images_to_pull(plan: WorkloadPlan) -> dict[str, PullPolicy]:
    """Each image the plan uses, with the strongest policy any of its users asks for."""
    uses: list[tuple[str, PullPolicy | None]] = [
        (plan.pause_image, plan.pause_image_pull_policy),
        *((c.image, c.image_pull_policy) for c in plan.containers),
    ]
    if plan.autoheal is not None:
        uses.append((plan.autoheal.image, None))
    wanted: dict[str, PullPolicy] = {}
    for image, policy in uses:
        policy = policy or DEFAULT_POLICY
        if image not in wanted or _RANK[policy] > _RANK[wanted[image]]:
            wanted[image] = policy
    return wanted


def reference_params(image: str) -> dict[str, str]:
    """``fromImage`` and ``tag`` for ``images/create``: without a tag the engine would pull every
    tag of the repository, so an untagged reference means ``latest``, as ``docker pull`` does."""
    name = image.rsplit("/", 1)[-1]
    if "@" in image or ":" in name:
        return {"fromImage": image}
    return {"fromImage": image, "tag": "latest"}


@attrs.define
class LayerProgress:
    """Sums an engine's per-layer pull messages into bytes and layers for the whole image."""

    _sizes: dict[str, list[int | None]] = attrs.field(factory=dict)  # layer → [done, total]
    _done: set[str] = attrs.field(factory=set)
    _bytes_reported: bool = False

    def feed(self, message: Mapping[str, Any]) -> bool:
        """Take one message; True when a layer finished (worth an event at once)."""
        status = str(message.get("status", "")).split(" in ", 1)[0]  # "Retrying in 5 seconds"
        layer = message.get("id")
        if not layer or status not in _LAYER:
            return False
        size = self._sizes.setdefault(str(layer), [0, None])
        detail = message.get("progressDetail") or {}
        if status == "Downloading" and isinstance(detail.get("total"), int):
            size[0], size[1] = int(detail.get("current") or 0), int(detail["total"])
            self._bytes_reported = True
        if status in _DONE and layer not in self._done:
            self._done.add(str(layer))
            if size[1] is not None:
                size[0] = size[1]
            return True
        return False

    def event(self, workload: str, elapsed: float, image: str) -> PullProgress:
        known = [s for s in self._sizes.values() if s[1] is not None]
        return PullProgress(
            workload=workload,
            elapsed=elapsed,
            image=image,
            bytes_done=sum(s[0] or 0 for s in known) if self._bytes_reported else None,
            bytes_total=sum(s[1] or 0 for s in known) if self._bytes_reported else None,
            layers_done=len(self._done),
            layers_total=len(self._sizes),
        )


class ImagePuller:
    """Pulls what one plan needs on one engine, reporting through ``emit``."""

    def __init__(
        self, session: EngineSession, present: Callable[[str], Awaitable[bool]] | None = None
    ) -> None:
        self._session = session
        self._engine = session.engine
        self._errors = session.errors  # the edge: transport errors → EngineUnavailable
        # whether an image is on the engine (the driver's: one look shared by concurrent creates)
        self._present = present or self.present

    async def pull_for(self, plan: WorkloadPlan, emit: Emit) -> None:
        """Pull every image the plan must have; raise ``CreateError`` naming each that failed
        (or the engine's own error, e.g. ``EngineUnavailable``, when the engine went away)."""
        started = anyio.current_time()
        failures: list[AsyncDeployError] = []
        async with anyio.create_task_group() as tg:

            async def ensure(image: str, policy: PullPolicy) -> None:
                try:
                    await self._ensure(plan, image, policy, emit, started)
                except AsyncDeployError as exc:  # no exception group for the caller to unpack
                    failures.append(exc)
                    tg.cancel_scope.cancel()  # the create fails: stop the other pulls

            for image, policy in images_to_pull(plan).items():
                tg.start_soon(ensure, image, policy)
        for failure in failures:
            if not isinstance(failure, CreateError):
                raise failure
        if failures:
            raise CreateError(f"{plan.name!r} was not created: " + "; ".join(map(str, failures)))

    async def _ensure(
        self, plan: WorkloadPlan, image: str, policy: PullPolicy, emit: Emit, started: float
    ) -> None:
        if built_in(image) is not None:  # built on this engine, never pulled from anywhere
            if not await self._present(image):
                raise CreateError(missing_message(image, self._engine))
            return
        if policy != "Always" and await self._present(image):
            return
        if policy == "Never":
            raise CreateError(
                f"image {image!r} is not on the {self._engine} engine and its "
                "image_pull_policy is Never: build or load it on the engine "
                f"({self._engine} build / {self._engine} load), or push it to a registry and "
                "set image_pull_policy to IfNotPresent or Always"
            )
        await self._pull(plan, image, policy, emit, started)

    async def present(self, image: str) -> bool:
        """Whether ``image`` is on the engine (one inspect)."""
        try:
            with self._errors(f"inspect image {image}"):
                await self._session.inspect_image(image)
        except WorkloadNotFound:
            return False
        return True

    async def _pull(
        self, plan: WorkloadPlan, image: str, policy: PullPolicy, emit: Emit, started: float
    ) -> None:
        registry = registry_of(image)
        credentials = await find_credentials(
            registry, engine=self._engine, plan_auth=plan.registry_auth
        )
        headers = {} if credentials is None else {"X-Registry-Auth": auth_header(credentials)}
        begun = anyio.current_time()

        def elapsed() -> float:
            return anyio.current_time() - started

        emit(
            PullStarted(
                workload=plan.name, elapsed=elapsed(), image=image, registry=registry, policy=policy
            )
        )
        try:
            await self._stream(plan.name, image, headers, emit, elapsed)
            with self._errors(f"inspect image {image}"):
                details = await self._session.inspect_image(image)
        except anyio.get_cancelled_exc_class():
            # another image failed, or the caller cancelled: no bar is left hanging
            emit(PullFailed(workload=plan.name, elapsed=elapsed(), image=image, reason="cancelled"))
            raise
        except (_PullError, WorkloadNotFound) as exc:
            reason = (
                exc.reason if isinstance(exc, _PullError) else "the image is not there after it"
            )
            remedy = (
                f"push it to a registry the {self._engine} engine reaches and name that registry "
                "in the image, or build or load it on the engine"
            )
            if any(marker in reason.lower() for marker in _UNAUTHORIZED):
                who = "without credentials" if credentials is None else f"with {credentials.source}"
                reason = f"unauthorized at {registry} ({who}): {reason}"
                remedy = f"give credentials for {registry} (registry_auth or an auth file)"
            emit(PullFailed(workload=plan.name, elapsed=elapsed(), image=image, reason=reason))
            raise CreateError(
                f"pulling image {image!r} from {registry} failed: {reason} (to provide it: {remedy})"
            ) from None
        emit(
            PullFinished(
                workload=plan.name,
                elapsed=elapsed(),
                image=image,
                digest=_digest(image, details),
                seconds=anyio.current_time() - begun,
            )
        )

    async def _stream(
        self,
        workload: str,
        image: str,
        headers: Mapping[str, str],
        emit: Emit,
        elapsed: Callable[[], float],
    ) -> None:
        """Run the pull to its end, emitting progress; ``_PullError`` carries the engine's reason."""
        progress = LayerProgress()
        last = 0.0
        # no time limit: a pull of a large image takes as long as it takes
        endless = aiohttp.ClientTimeout(total=None, sock_read=None)
        with self._errors(f"pull {image}"):
            try:
                async with self._session.query(
                    "images/create",
                    "POST",
                    params=reference_params(image),
                    headers=headers,
                    timeout=endless,
                ) as response:
                    async for line in response.content:
                        message = _json_line(line)
                        if message.get("error") or message.get("errorDetail"):
                            detail = message.get("errorDetail") or {}
                            raise _PullError(str(detail.get("message") or message.get("error")))
                        now = anyio.current_time()
                        if progress.feed(message) or now - last >= PROGRESS_INTERVAL:
                            last = now
                            emit(progress.event(workload, elapsed(), image))
            except aiodocker.DockerError as exc:
                if exc.status == 900:  # aiodocker's "cannot connect": the engine went away
                    raise
                raise _PullError(str(exc.message)) from None
            except aiohttp.ClientPayloadError as exc:  # the engine, not the registry, went away
                raise EngineUnavailable(
                    f"pull {image}: the connection to the engine dropped mid-pull ({exc})",
                    engine=self._engine,
                ) from exc


class _PullError(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


def _digest(image: str, details: Mapping[str, Any]) -> str:
    """The digest of the pulled reference from ``RepoDigests`` (``repo@sha256:...``)."""
    digests = [str(d) for d in details.get("RepoDigests") or []]
    repository = image.split("@", 1)[0]
    name = repository.rsplit("/", 1)[-1]
    if ":" in name:
        repository = repository.rsplit(":", 1)[0]
    for entry in digests:
        repo, _, digest = entry.partition("@")
        if repo == repository or repo.endswith("/" + repository):
            return digest
    return digests[0].partition("@")[2] if digests else ""


def _json_line(line: bytes) -> Mapping[str, Any]:
    try:
        item = json.loads(line)
    except ValueError:
        return {}
    return item if isinstance(item, dict) else {}
