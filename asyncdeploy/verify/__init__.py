"""Proof of lossless termination: traffic through a workload while it is deleted or replaced."""

from __future__ import annotations

from asyncdeploy.verify.report import VerifyReport
from asyncdeploy.verify.run import DEMO_IMAGE, VerifyOptions, demo_plan, from_registry, run_verify
from asyncdeploy.verify.traffic import RequestRecord, TrafficMix

__all__ = [
    "DEMO_IMAGE",
    "RequestRecord",
    "TrafficMix",
    "VerifyOptions",
    "VerifyReport",
    "demo_plan",
    "from_registry",
    "run_verify",
]
