"""The request syntax of ``verify --request`` and ``--requests``: lines, files, round trips."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncdeploy.verify.requests import (
    RequestSpec,
    RequestSpecError,
    load_requests_file,
    parse_request,
    parse_requests_document,
)


def test_a_completion_request_line() -> None:
    """The README's example reads as it says."""
    spec = parse_request(
        "POST /v1/completions body='{\"prompt\": \"hi\"}' header='Authorization: Bearer x' "
        "stream until='[DONE]' rate=4 name=complete"
    )
    assert spec == RequestSpec(
        method="POST",
        path="/v1/completions",
        body=b'{"prompt": "hi"}',
        headers=(("Authorization", "Bearer x"),),
        stream=True,
        until="[DONE]",
        rate=4.0,
        name="complete",
    )
    assert spec.label == "complete"
    assert spec.content_type() == "application/json"


def test_defaults_get_and_any_2xx() -> None:
    spec = parse_request("/healthz?x=1")
    assert (spec.method, spec.path, spec.rate, spec.stream) == ("GET", "/healthz?x=1", 1.0, False)
    assert spec.label == "GET /healthz?x=1"
    assert spec.expected(200) and spec.expected(204) and not spec.expected(404)
    assert parse_request("/x expect=404").expected(404)
    assert not parse_request("/x expect=404").expected(200)


def test_body_from_a_file(tmp_path: Path) -> None:
    """``body=@FILE`` names a file; its bytes are read once, before any traffic."""
    (tmp_path / "req.json").write_bytes(b'{"a": 1}')
    spec = parse_request(f"POST /v1 body=@{tmp_path / 'req.json'}")
    assert spec.body is None and spec.body_file == str(tmp_path / "req.json")
    assert spec.with_body().body == b'{"a": 1}'
    assert parse_request("POST /v1 body=@@handle").body == b"@handle"  # @@: a text
    with pytest.raises(RequestSpecError, match=r"missing\.json"):
        parse_request("POST /v1 body=@missing.json").with_body(tmp_path)


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("", "expected"),
        ("POST", "expected"),
        ("v1/completions", "expected"),
        ("/a streem", "unknown option"),
        ("/a colour=red", "unknown option"),
        ("/a rate=fast", "not a number"),
        ("/a rate=nan", "rate"),
        ("/a rate=-1", "rate"),
        ("/a expect=20", "three-digit"),
        ("/a expect=999", "100-599"),
        ("/a header=NoColon", "NAME:VALUE"),
        ("/a 'header=Bad Name:x'", "not an HTTP token"),
        ("/a body=@", "name a file"),
        ("/a until=", "empty"),
        ("/a 'unclosed", "quotation"),
        ("post /a", "expected"),
    ],
)
def test_bad_lines_say_what_is_wrong(line: str, says: str) -> None:
    with pytest.raises(RequestSpecError, match=says):
        parse_request(line)


def test_a_requests_file_of_lines_and_mappings(tmp_path: Path) -> None:
    """YAML (or JSON) items are request lines or mappings; a mapping body is sent as JSON."""
    (tmp_path / "body.bin").write_bytes(b"\x00\x01")
    file = tmp_path / "requests.yaml"
    file.write_text(
        "- GET /short rate=5\n"
        "- method: POST\n"
        "  path: /v1/chat/completions\n"
        "  body: {model: m, stream: true}\n"
        "  headers: {X-Tenant: t1}\n"
        "  stream: true\n"
        "  until: '[DONE]'\n"
        "- {path: /upload, method: PUT, body_file: body.bin, expect: 201}\n"
    )
    short, chat, upload = load_requests_file(str(file))
    assert short == RequestSpec(path="/short", rate=5.0)
    assert json.loads(chat.body or b"") == {"model": "m", "stream": True}
    assert chat.headers == (("X-Tenant", "t1"),) and chat.stream and chat.until == "[DONE]"
    assert upload.body == b"\x00\x01" and upload.expect == 201  # relative to the file
    assert upload.content_type() == "application/octet-stream"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "non-empty list"),
        ("{path: /a}", "non-empty list"),
        ("- 3", r"requests\[0\]: a request line or a mapping"),
        ("- {method: GET}", "path is required"),
        ("- {path: /a, colour: red}", "unknown keys"),
        ("- {path: /a, rate: fast}", "a number"),
        ("- {path: /a, stream: yes please}", "true or false"),
        ("- {path: /a, headers: [x]}", "mapping"),
        ("- /a rate=x", r"requests\[0\]: rate"),
        ("- {path: /a, path: /b}", "appears twice"),
        ("- [", "not valid YAML"),
    ],
)
def test_bad_requests_files_say_where(text: str, says: str) -> None:
    with pytest.raises(RequestSpecError, match=says):
        parse_requests_document(text, "requests")


_printable = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20
)
specs = st.builds(
    RequestSpec,
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
    path=st.text(alphabet=string.ascii_letters + string.digits + "/?&=%-._~", max_size=30).map(
        lambda p: "/" + p
    ),
    name=st.none() | _printable.filter(lambda s: s.strip() == s),
    body=st.none() | _printable.map(str.encode),
    headers=st.lists(
        st.tuples(
            st.text(alphabet=string.ascii_letters + "-", min_size=1, max_size=12),
            _printable.filter(lambda s: s.strip() == s),
        ),
        max_size=3,
    ).map(tuple),
    stream=st.booleans(),
    until=st.none() | _printable,
    rate=st.floats(min_value=0, max_value=1000, allow_nan=False),
    expect=st.none() | st.integers(min_value=100, max_value=599),
)


@settings(deadline=None)  # a loaded machine must not fail a parser test
@given(specs)
def test_a_line_parses_back_into_its_spec(spec: RequestSpec) -> None:
    """Render, then parse: the same spec (quoting survives spaces, quotes and `=`)."""
    assert parse_request(spec.to_line()) == spec


@settings(deadline=None)  # a loaded machine must not fail a parser test
@given(st.text(max_size=80))
def test_any_line_parses_or_says_why(line: str) -> None:
    """Whatever the user types: a spec, or a RequestSpecError; never another exception."""
    try:
        spec = parse_request(line)
    except RequestSpecError as exc:
        said = str(exc)
        assert said
    else:
        assert spec.path.startswith("/")


@settings(deadline=None)  # a loaded machine must not fail a parser test
@given(st.text(max_size=200))
def test_any_requests_file_parses_or_says_why(text: str) -> None:
    try:
        parse_requests_document(text)
    except RequestSpecError as exc:
        said = str(exc)
        assert said
