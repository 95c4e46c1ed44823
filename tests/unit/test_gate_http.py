"""The gate's HTTP/1.1 framing parser: heads and chunked bodies, by example and by property."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncdeploy.gate._http import (
    BodyKind,
    ChunkedScanner,
    HTTPParseError,
    parse_request_head,
    parse_response_head,
    with_connection_close,
)

TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-!#$%&'*+.^_`|~", min_size=1, max_size=12)  # fmt: skip
VALUE = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=20)
PATH = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30).map(lambda s: "/" + s)  # fmt: skip


def encode_chunked(pieces: list[bytes], extensions: list[str], trailers: list[tuple[str, str]]) -> bytes:  # fmt: skip
    out = b""
    for i, piece in enumerate(pieces):
        ext = f";{extensions[i % len(extensions)]}" if extensions else ""
        out += f"{len(piece):x}{ext}\r\n".encode() + piece + b"\r\n"
    out += b"0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in trailers) + b"\r\n"
    return out


def splits(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@given(
    pieces=st.lists(st.binary(min_size=1, max_size=300), max_size=8),
    extensions=st.lists(TOKEN, max_size=2),
    trailers=st.lists(st.tuples(TOKEN, VALUE), max_size=3),
    cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=12),
    after=st.binary(max_size=40),
)
def test_the_scanner_finds_the_end_of_any_chunked_body_however_it_is_split(
    pieces: list[bytes],
    extensions: list[str],
    trailers: list[tuple[str, str]],
    cuts: list[int],
    after: bytes,
) -> None:
    """Fed in any pieces, the scanner takes exactly the body's bytes and counts its payload."""
    body = encode_chunked(pieces, extensions, trailers)
    scanner = ChunkedScanner()
    taken = 0
    for part in splits(body + after, cuts):
        if scanner.done:
            break
        used = scanner.feed(part)
        assert 0 <= used <= len(part)
        if not scanner.done:
            assert used == len(part)  # nothing is held back before the end
        taken += used
    assert scanner.done
    assert taken == len(body)
    assert scanner.payload == sum(map(len, pieces))


@given(st.binary(max_size=200))
def test_any_bytes_are_a_body_prefix_or_a_parse_error(data: bytes) -> None:
    """Garbage never raises anything but HTTPParseError."""
    scanner = ChunkedScanner()
    try:
        used = scanner.feed(data)
    except HTTPParseError:
        return
    assert used <= len(data)


@given(
    method=TOKEN,
    path=PATH,
    headers=st.lists(st.tuples(TOKEN, VALUE), max_size=6),
)
def test_a_request_head_parses_back_to_what_was_written(
    method: str, path: str, headers: list[tuple[str, str]]
) -> None:
    headers = [
        (k, v) for k, v in headers if k.lower() not in ("content-length", "transfer-encoding")
    ]
    raw = f"{method} {path} HTTP/1.1\r\n".encode()
    raw += b"".join(f"{k}: {v}\r\n".encode() for k, v in headers) + b"\r\n"
    head = parse_request_head(raw)
    assert (head.method, head.target, head.raw) == (method.encode(), path.encode(), raw)
    assert head.headers == tuple((k.lower().encode(), v.encode()) for k, v in headers)
    assert head.body is BodyKind.NONE


@given(st.binary(max_size=300))
def test_any_bytes_are_a_head_or_a_parse_error(data: bytes) -> None:
    for parse in (parse_request_head, parse_response_head):
        try:
            parse(data + b"\r\n\r\n")
        except HTTPParseError:
            pass


@pytest.mark.parametrize(
    ("raw", "kind", "length"),
    [
        (b"POST /x HTTP/1.1\r\nContent-Length: 12\r\n\r\n", BodyKind.LENGTH, 12),
        (b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", BodyKind.CHUNKED, 0),
        (b"POST /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n", BodyKind.NONE, 0),
        (b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n", BodyKind.NONE, 0),
    ],
)
def test_request_framing(raw: bytes, kind: BodyKind, length: int) -> None:
    head = parse_request_head(raw)
    assert (head.body, head.length) == (kind, length)


@pytest.mark.parametrize(
    "raw",
    [
        b"POST /x HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",  # smuggling
        b"POST /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        b"POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"GET /x HTTP/2.0\r\n\r\n",
        b"GET  /x HTTP/1.1\r\n\r\n",
        b"GET /x HTTP/1.1\r\nbad header\r\n\r\n",
        b"GET /x HTTP/1.1\r\nBad Name: v\r\n\r\n",
    ],
)
def test_requests_the_gate_refuses(raw: bytes) -> None:
    with pytest.raises(HTTPParseError):
        parse_request_head(raw)


@pytest.mark.parametrize(
    ("raw", "method", "kind"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", b"GET", BodyKind.LENGTH),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", b"HEAD", BodyKind.NONE),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b"GET", BodyKind.NONE),
        (b"HTTP/1.1 304 Not Modified\r\n\r\n", b"GET", BodyKind.NONE),
        (b"HTTP/1.1 100 Continue\r\n\r\n", b"POST", BodyKind.NONE),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"GET", BodyKind.CHUNKED),
        (b"HTTP/1.0 200 OK\r\n\r\n", b"GET", BodyKind.UNTIL_CLOSE),
        (b"HTTP/1.1 200\r\n\r\n", b"GET", BodyKind.UNTIL_CLOSE),
    ],
)
def test_response_framing(raw: bytes, method: bytes, kind: BodyKind) -> None:
    assert parse_response_head(raw, request_method=method).body is kind


def test_keep_alive_and_interim_answers() -> None:
    assert parse_response_head(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").keep_alive
    assert not parse_response_head(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n").keep_alive
    assert not parse_response_head(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n").keep_alive
    assert parse_response_head(b"HTTP/1.1 103 Early Hints\r\n\r\n").interim
    assert not parse_response_head(b"HTTP/1.1 101 Switching Protocols\r\n\r\n").interim
    assert not parse_request_head(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive
    assert parse_request_head(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive


def test_connection_close_replaces_the_connection_header_only() -> None:
    head = parse_response_head(
        b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\nX-A: b\r\n\r\n"
    )
    rewritten = with_connection_close(head)
    assert rewritten == (
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: b\r\nConnection: close\r\n\r\n"
    )
    assert not parse_response_head(rewritten).keep_alive
