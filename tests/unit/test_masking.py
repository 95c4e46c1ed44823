"""Masking: credentials never printed, whether named secret or hidden inside a URL or DSN."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from asyncdeploy._errors import PlanError
from asyncdeploy.drivers.kubernetes import _status as pod_status
from asyncdeploy.masking import MASK, mask_env_entry, mask_text, mask_tree, masked_repr
from asyncdeploy.plan import WorkloadPlan


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("postgres://u:pw@host:5432/db", f"postgres://u:{MASK}@host:5432/db"),
        ("redis://:pw@cache", f"redis://:{MASK}@cache"),
        ("https://u:p@ss@host/x", f"https://u:{MASK}@host/x"),
        ("https://user@host/x", "https://user@host/x"),
        (
            "host=db user=app password=hunter2 dbname=x",
            f"host=db user=app password={MASK} dbname=x",
        ),
        ("host=db password='a b c' port=5", f"host=db password={MASK} port=5"),
        ("Server=db;Uid=app;Pwd=hunter2;", f"Server=db;Uid=app;Pwd={MASK};"),
        ("https://api/x?api_key=abc&page=2", f"https://api/x?api_key={MASK}&page=2"),
        ("Authorization: Bearer abc.def", f"Authorization: {MASK}"),
        ("Cookie: session=abc; theme=dark", f"Cookie: {MASK}"),
        ("--model tiny --port 8080", "--model tiny --port 8080"),
    ],
)
def test_credentials_inside_text_are_masked(text: str, masked: str) -> None:
    assert mask_text(text) == masked


@pytest.mark.parametrize(
    ("entry", "masked"),
    [
        ("API_TOKEN=abc", f"API_TOKEN={MASK}"),
        ("DB_PASSWORD=abc", f"DB_PASSWORD={MASK}"),
        ("SESSION_COOKIE=abc", f"SESSION_COOKIE={MASK}"),
        ("SENTRY_DSN=https://k@o.ingest/1", f"SENTRY_DSN={MASK}"),
        ("DATABASE_URL=postgres://u:pw@db/x", f"DATABASE_URL=postgres://u:{MASK}@db/x"),
        ("MODEL=tiny", "MODEL=tiny"),
        ("EMPTY_TOKEN=", "EMPTY_TOKEN="),
    ],
)
def test_env_entries_masked_by_name_and_by_content(entry: str, masked: str) -> None:
    assert mask_env_entry(entry) == masked


def test_mask_tree_masks_by_key_and_content() -> None:
    data = {
        "Env": ["A=postgres://u:pw@h"],
        "Cmd": ["--db", "x://u:pw@h"],
        "auth_token": "t",
        "n": 1,
    }
    assert mask_tree(data) == {
        "Env": [f"A=postgres://u:{MASK}@h"],
        "Cmd": ["--db", f"x://u:{MASK}@h"],
        "auth_token": MASK,
        "n": 1,
    }


def test_kubernetes_inspect_masks_urls_in_env_and_args() -> None:
    pod = {
        "metadata": {"name": "p", "managedFields": [{}]},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "args": ["--db", "postgres://u:argpw@db/x"],
                    "env": [
                        {"name": "DATABASE_URL", "value": "postgres://u:envpw@db/x"},
                        {"name": "HF_TOKEN", "value": "hf_abc"},
                    ],
                }
            ]
        },
    }
    text = repr(pod_status.masked_pod(pod))
    assert "argpw" not in text and "envpw" not in text and "hf_abc" not in text
    assert "postgres://u:****@db/x" in text


def test_plan_error_never_echoes_a_secret_variables_value() -> None:
    with pytest.raises(PlanError) as caught:
        WorkloadPlan.from_mapping(
            {
                "name": "a",
                "containers": [{"name": "x", "image": "i", "env": {"DB_PASSWORD": 123456789}}],
            }
        )
    assert caught.value.path == "containers[0].env.DB_PASSWORD"
    assert "123456789" not in str(caught.value)


def test_plan_error_masks_a_url_password_in_any_echoed_value() -> None:
    with pytest.raises(PlanError) as caught:
        WorkloadPlan.from_mapping(
            {
                "name": "a",
                "containers": [
                    {"name": "x", "image": "i", "command": {"db": "postgres://u:pw123@h"}}
                ],
            }
        )
    assert "pw123" not in str(caught.value)


def test_describe_is_bounded() -> None:
    deep: list[object] = []
    for _ in range(10_000):
        deep = [deep]
    assert len(masked_repr(deep)) < 100
    assert len(masked_repr("x" * 100_000)) < 100


# --- properties ------------------------------------------------------------------------------

# Anything but whitespace, which cannot be part of a URL (a password with one is not a URL).
secret_text = st.text(
    st.characters(max_codepoint=0x2FFF, exclude_categories=("Zs", "Zl", "Zp", "Cc")),
    min_size=6,
    max_size=30,
)


@given(
    st.sampled_from(["postgres", "mysql+pymysql", "redis", "https", "amqp"]),
    st.from_regex(r"[a-z0-9_]{0,8}", fullmatch=True),
    secret_text,
    st.from_regex(r"[a-z0-9.-]{1,12}(:[0-9]{1,5})?(/[a-z0-9]{0,8})?", fullmatch=True),
)
def test_a_password_in_a_url_never_survives(scheme: str, user: str, secret: str, rest: str) -> None:
    url = f"{scheme}://{user}:{secret}@{rest}"
    assume(secret not in f"{scheme}://{user}:@{rest}")
    for shown in (mask_text(url), mask_env_entry(f"DATABASE_URL={url}"), mask_text(f"x {url} y")):
        assert secret not in shown


@given(st.sampled_from(["password", "PWD", "token", "client_secret"]), secret_text)
def test_a_secret_pair_in_a_dsn_never_survives(key: str, secret: str) -> None:
    assume(not any(c in secret for c in " ;&,'\""))
    dsn = f"host=db {key}={secret} dbname=app"
    assume(secret not in "host=db dbname=app" and secret not in key)
    assert secret not in mask_text(dsn)
