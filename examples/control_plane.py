"""An async control plane that deletes workloads and streams their drain to its own clients.

    python examples/control_plane.py [--driver docker|podman] [--port 8765]

``DELETE /workloads/{name}?grace=N`` answers with one JSON line per drain event, as they happen
(newline-delimited JSON over a chunked response). The deployer is opened once with the app and
shared by every request: no global client.
"""

from __future__ import annotations

import argparse
import json

from aiohttp import web

from asyncdeploy import (
    AsyncDeployError,
    WorkloadNotFound,
    WorkloadPlan,
    event_to_dict,
    open_deployer,
)

DEPLOYER = web.AppKey("deployer", object)


async def create_workload(request: web.Request) -> web.Response:
    plan = WorkloadPlan.from_mapping(await request.json())
    result = await request.app[DEPLOYER].create(plan)  # type: ignore[attr-defined]
    return web.json_response({"action": result.action, "workload": plan.name})


async def delete_workload(request: web.Request) -> web.StreamResponse:
    deployer = request.app[DEPLOYER]
    grace = request.query.get("grace")
    name = request.match_info["name"]
    try:
        drain = deployer.terminate(name, grace_period_seconds=None if grace is None else int(grace))  # type: ignore[attr-defined]
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        async with drain as events:
            await response.prepare(request)
            async for event in events:
                await response.write(json.dumps(event_to_dict(event)).encode() + b"\n")
    except WorkloadNotFound as exc:
        raise web.HTTPNotFound(text=str(exc)) from exc
    except AsyncDeployError as exc:
        if not response.prepared:
            raise web.HTTPInternalServerError(text=str(exc)) from exc
        await response.write(json.dumps({"event": "error", "message": str(exc)}).encode() + b"\n")
    await response.write_eof()
    return response


def make_app(driver: str | None) -> web.Application:
    app = web.Application()

    async def deployer_context(app: web.Application):  # type: ignore[no-untyped-def]
        async with open_deployer(driver) as deployer:
            app[DEPLOYER] = deployer
            yield

    app.cleanup_ctx.append(deployer_context)
    app.router.add_post("/workloads", create_workload)
    app.router.add_delete("/workloads/{name}", delete_workload)
    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", default=None)
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    web.run_app(make_app(args.driver), host="127.0.0.1", port=args.port)
