"""Proof of lossless termination: traffic through a workload while it is deleted or replaced."""

from __future__ import annotations

from asyncdeploy.verify.balancer import BalancerError, BalancerOptions, ServerState
from asyncdeploy.verify.report import VerifyReport
from asyncdeploy.verify.requests import (
    RequestSpec,
    RequestSpecError,
    load_requests_file,
    parse_request,
    parse_requests_document,
)
from asyncdeploy.verify.run import DEMO_IMAGE, VerifyOptions, demo_plan, from_registry, run_verify
from asyncdeploy.verify.traffic import RequestRecord, TrafficMix

__all__ = [
    "DEMO_IMAGE",
    "BalancerError",
    "BalancerOptions",
    "RequestRecord",
    "RequestSpec",
    "RequestSpecError",
    "ServerState",
    "TrafficMix",
    "VerifyOptions",
    "VerifyReport",
    "demo_plan",
    "from_registry",
    "load_requests_file",
    "parse_request",
    "parse_requests_document",
    "run_verify",
]
