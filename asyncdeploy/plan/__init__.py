"""The declarative workload plan and everything that reads, checks or translates it, pure.

A plan is built in Python (``WorkloadPlan(name=..., containers=[...])``) or from a mapping or a
YAML/JSON file whose keys are exactly the attribute names (``WorkloadPlan.from_file(path)``).
Every invalid value raises :class:`~asyncdeploy._errors.PlanError` naming the field path.

The package (importing it loads the values only; the rest is imported by name):

- ``_model``: ``WorkloadPlan`` and ``Container``; ``_parts``: the values a container is made of;
  ``_fields``: the field rules and each field's words; ``_mapping``: plan files to values and
  back; ``_documents``: strict YAML reading; ``quantity``: strict Kubernetes quantities;
- ``schema``: the JSON Schema and reference page, generated from the fields;
- ``gating``: a container's ``gate:`` expanded into its sidecar; ``presets``: what is known of
  each inference engine's image;
- ``lint`` and ``lint_ports``: the termination budget and the ports a plan's checks reach.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from asyncdeploy.plan._model import (
    DEFAULT_GATE_IMAGE,
    DEFAULT_GRACE_PERIOD_SECONDS,
    DEFAULT_PAUSE_IMAGE,
    GATE_TOKEN_ENV,
    MAX_SECONDS,
    Autoheal,
    Checks,
    Container,
    FrozenCounts,
    FrozenMap,
    Gate,
    GateReady,
    HTTPGet,
    Mount,
    Port,
    Probe,
    PullPolicy,
    RegistryAuth,
    Resources,
    Service,
    ServicePort,
    WorkloadPlan,
    gate_name,
    masked_plan_record,
    plan_digest,
    plan_from_record,
    plan_record,
    plan_to_mapping,
)

__all__ = [
    "DEFAULT_GATE_IMAGE",
    "DEFAULT_GRACE_PERIOD_SECONDS",
    "DEFAULT_PAUSE_IMAGE",
    "GATE_TOKEN_ENV",
    "MAX_SECONDS",
    "Autoheal",
    "Checks",
    "Container",
    "FrozenCounts",
    "FrozenMap",
    "Gate",
    "GateReady",
    "HTTPGet",
    "Mount",
    "Port",
    "Probe",
    "PullPolicy",
    "RegistryAuth",
    "Resources",
    "Service",
    "ServicePort",
    "WorkloadPlan",
    "gate_name",
    "masked_plan_record",
    "plan_digest",
    "plan_from_record",
    "plan_record",
    "plan_to_mapping",
    "read_plans",
]


def read_plans(
    sources: Sequence[str | Path], *, stdin: BinaryIO | None = None
) -> list[WorkloadPlan]:
    """Every plan in ``sources`` as kubectl reads ``-f``: files, folders (their ``.yaml``,
    ``.yml`` and ``.json`` files), ``-`` for ``stdin``, several documents per file (``---``).

    Raises one ``PlanError`` listing every problem, each at its file and line
    (``PlanError.problems``)."""
    from asyncdeploy.plan._files import read_plans as read  # PyYAML: not for the server kit

    return read(sources, stdin=stdin)
