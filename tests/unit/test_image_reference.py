"""Image references in plans follow the distribution reference grammar (exit 2 otherwise).

The oracle is a transcription of github.com/distribution/reference's ``regexp.go``
(``ReferenceRegexp``) plus what its ``Parse`` adds (a name of at most 255 characters, the digest
validated by go-digest); the implementation is a separate hand-written parser.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

from asyncdeploy import Container, PlanError, WorkloadPlan
from asyncdeploy._image_reference import image_reference_problem
from asyncdeploy.cli import main

# --- regexp.go, transcribed ---------------------------------------------------------------
ALPHANUMERIC = r"[a-z0-9]+"
SEPARATOR = r"(?:[._]|__|[-]+)"
PATH_COMPONENT = ALPHANUMERIC + r"(?:" + SEPARATOR + ALPHANUMERIC + r")*"
DOMAIN_NAME_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
DOMAIN_NAME = DOMAIN_NAME_COMPONENT + r"(?:\." + DOMAIN_NAME_COMPONENT + r")*"
IPV6 = r"\[(?:[a-fA-F0-9:]+)\]"
HOST = r"(?:" + DOMAIN_NAME + r"|" + IPV6 + r")"
DOMAIN_AND_PORT = HOST + r"(?::[0-9]+)?"
TAG = r"[\w][\w.-]{0,127}"
DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9a-fA-F]{32,}"
REMOTE_NAME = PATH_COMPONENT + r"(?:/" + PATH_COMPONENT + r")*"
NAME = r"(?:" + DOMAIN_AND_PORT + r"/)?" + REMOTE_NAME
REFERENCE = re.compile(r"(" + NAME + r")(?::(" + TAG + r"))?(?:@(" + DIGEST + r"))?", re.ASCII)
GO_DIGEST = {"sha256": 64, "sha384": 96, "sha512": 128}


def oracle(reference: str) -> bool:
    match = REFERENCE.fullmatch(reference)
    if match is None or len(match.group(1)) > 255:
        return False
    if match.group(3):
        algorithm, _, hex_part = match.group(3).partition(":")
        length = GO_DIGEST.get(algorithm)
        return length == len(hex_part) and re.fullmatch(r"[0-9a-f]+", hex_part) is not None
    return True


# --- strategies ----------------------------------------------------------------------------
alnum = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=6)
separator = st.sampled_from([".", "_", "__", "-", "--"])
component = st.builds(
    lambda first, rest: first + "".join(s + a for s, a in rest),
    alnum,
    st.lists(st.tuples(separator, alnum), max_size=3),
)
domain_component = st.from_regex(r"[a-zA-Z0-9]([a-zA-Z0-9-]{0,5}[a-zA-Z0-9])?", fullmatch=True)
domain = st.one_of(
    st.builds(lambda parts: ".".join(parts), st.lists(domain_component, min_size=2, max_size=3)),
    st.just("localhost"),
    st.just("[::1]"),
)
port = st.one_of(st.just(""), st.integers(1, 65535).map(lambda p: f":{p}"))
tag = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)
digest = st.sampled_from(sorted(GO_DIGEST)).flatmap(
    lambda a: st.text("0123456789abcdef", min_size=GO_DIGEST[a], max_size=GO_DIGEST[a]).map(
        lambda h: f"{a}:{h}"
    )
)


@st.composite
def valid_references(draw: st.DrawFn) -> str:
    name = "/".join(draw(st.lists(component, min_size=1, max_size=3)))
    if draw(st.booleans()):
        name = f"{draw(domain)}{draw(port)}/{name}"
    if draw(st.booleans()):
        name += f":{draw(tag)}"
    if draw(st.booleans()):
        name += f"@{draw(digest)}"
    return name


@given(valid_references())
@settings(max_examples=300)
def test_every_reference_of_the_grammar_is_accepted(reference: str) -> None:
    assert oracle(reference), reference  # the strategy itself follows the grammar
    assert image_reference_problem(reference) is None, reference


@given(st.text("aAbz09._-/:@[]", max_size=24) | st.text(max_size=12))
@settings(max_examples=2000)
@example("Busybox")
@example("busybox@sha256:abc")
@example("a:1:2")
@example("http://registry.example/x")
@example("Foo/bar")
@example("a___b")
@example("localhost:/x")
@example("[::1]:/x")
@example("x@sha256:" + "A" * 64)
def test_the_parser_agrees_with_the_grammar_on_any_text(text: str) -> None:
    assert (image_reference_problem(text) is None) == oracle(text), text


def test_a_name_of_more_than_255_characters_is_refused() -> None:
    name = "/".join(["a" * 63] * 4) + "/ab"  # 4 x 63 + 4 slashes + 2
    assert len(name) == 258
    assert "255" in (image_reference_problem(name) or "")
    assert image_reference_problem(name[:255].rstrip("/")) is None


@pytest.mark.parametrize(
    "image",
    [
        "asyncdeploy-demo/Server",
        "Busybox",
        "busybox@sha256:abc",
        "a:1:2",
        "http://registry.example/x:1",
    ],
)
def test_the_issues_references_are_plan_errors_with_exit_2(image: str, tmp_path: Path) -> None:
    with pytest.raises(PlanError) as raised:
        WorkloadPlan.from_mapping({"name": "w", "containers": [{"name": "s", "image": image}]})
    assert raised.value.path == "containers[0].image"
    assert "is not a valid image reference" in str(raised.value)
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"name: w\ncontainers:\n  - name: s\n    image: '{image}'\n")
    result = CliRunner().invoke(main, ["--driver", "docker", "create", "-f", str(plan)])
    assert result.exit_code == 2, result.output
    assert "not a valid image reference" in result.output
    assert "Traceback" not in result.output


def test_pause_and_autoheal_images_are_checked_too() -> None:
    with pytest.raises(PlanError, match="pause_image"):
        WorkloadPlan(name="w", pause_image="Pause", containers=[Container(name="s", image="a")])
    with pytest.raises(PlanError, match="image"):
        WorkloadPlan.from_mapping(
            {"name": "w", "containers": [{"name": "s", "image": "a"}], "autoheal": {"image": "A"}}
        )
