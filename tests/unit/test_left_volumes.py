"""Which plans' named volumes are left with no container (pure: ``_unfinished.left_volumes``)."""

from __future__ import annotations

import json
from typing import Any

import attrs

from asyncdeploy._owner import Owner
from asyncdeploy.drivers.engine._unfinished import left_volumes
from asyncdeploy.labels import (
    LABEL_ATTEMPT_OWNER,
    LABEL_INSTANCE_OF,
    LABEL_LOCK,
    LABEL_VOLUME_PLAN,
    LABEL_WORKLOAD,
)

DEAD = attrs.evolve(Owner.this_process(), pid=999_999_999)


def volume(plan: str, maker: Owner | None = DEAD, **labels: str) -> dict[str, Any]:
    owner = {} if maker is None else {LABEL_ATTEMPT_OWNER: json.dumps(maker.to_data())}
    return {"Name": f"{plan}-data", "Labels": {LABEL_VOLUME_PLAN: plan, **owner, **labels}}


def container(workload: str, **labels: str) -> dict[str, Any]:
    return {"Id": "x", "Labels": {LABEL_WORKLOAD: workload, **labels}}


def test_a_volume_with_no_container_of_its_plan_is_left_and_says_so() -> None:
    left = left_volumes([volume("web", team="a")], [container("other")])
    assert left == {
        "web": ("half-made: volume web-data left with no container of the plan", {"team": "a"})
    }


def test_a_volume_its_plan_or_an_instance_of_it_still_uses_is_not_left() -> None:
    volumes = [volume("web"), volume("api")]
    items = [container("web"), container("api-1a2b", **{LABEL_INSTANCE_OF: "api"})]
    assert left_volumes(volumes, items) == {}


def test_a_volume_between_a_recreates_two_instances_is_not_left() -> None:
    lock = {
        "Name": "asyncdeploy-replace-lock.web",
        "Labels": {LABEL_LOCK: "asyncdeploy-replace-lock.web"},
    }
    assert left_volumes([volume("web")], [], [lock]) == {}


def test_a_live_makers_volume_is_not_left_and_an_unknown_makers_says_so() -> None:
    assert left_volumes([volume("web", Owner.this_process())], []) == {}
    [(why, _)] = left_volumes([volume("web", None)], []).values()
    assert why.endswith("(unknown owner)")
