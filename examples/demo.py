"""The main job: deploy the demo inference server, delete it under traffic, show the drain live.

    python examples/demo.py [--driver docker|podman] [--negative-control]

It deploys the demo server (pause + server with a readiness check and a ``pre_stop`` drain),
sends a mix of short, long and streaming requests, deletes the workload while they are in
flight, shows every step of the drain with a countdown to the deadline, and ends with a table
of requests by kind and outcome. ``--negative-control`` deploys the server ignoring SIGTERM and
without the drain hook: the same delete then truncates requests.
"""

from __future__ import annotations

import argparse
import sys

import anyio
import attrs

from asyncdeploy import open_deployer
from asyncdeploy.cli.render import for_stream
from asyncdeploy.verify import VerifyOptions, demo_plan, run_verify

PAUSE_IMAGE = "asyncdeploy-test/pause:latest"  # built locally by ci/setup.sh: no registry here


async def main(args: argparse.Namespace) -> int:
    plan = demo_plan(
        "demo",
        pause_image=args.pause_image,
        grace_period_seconds=args.grace,
        ignore_sigterm=args.negative_control,
    )
    if args.negative_control:
        plan = attrs.evolve(plan, termination_grace_period_seconds=5)
    view = for_stream(sys.stderr)  # live view on a terminal of 80+ columns, else plain lines
    async with open_deployer(args.driver) as deployer:
        print(f"engine: {deployer.driver_name}", file=sys.stderr)
        report = await run_verify(
            deployer,
            plan,
            VerifyOptions(warmup_seconds=args.warmup),
            on_event=view.show,
            on_status=lambda line: print(f"-- {line}", file=sys.stderr),
        )
    view.close()
    print(report.text())
    return 0 if report.passed or args.negative_control else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", choices=["docker", "podman", "kubernetes"], default=None)
    parser.add_argument("--pause-image", default=PAUSE_IMAGE)
    parser.add_argument("--grace", type=int, default=30, help="termination grace period (s)")
    parser.add_argument("--warmup", type=float, default=3.0, help="traffic before the delete (s)")
    parser.add_argument("--negative-control", action="store_true")
    sys.exit(anyio.run(main, parser.parse_args()))
