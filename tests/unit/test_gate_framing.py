"""The gate's request framing against llhttp and h11, by example and by property.

The gate frames with llhttp (httptools) and sends on a message rebuilt from what it parsed.
The property that keeps smuggling out: whatever bytes a client sends, each request the gate
would send to the engine is parsed by h11 (a strict, independent parser standing in for the
engine) as exactly one request with the same method, target, header fields and body that
llhttp saw, and nothing else; and what llhttp refuses is answered 400 and never sent on.
The harness drives the real client protocol's parser callbacks (no I/O): an admitted exchange
whose upstream is never opened keeps what it would send (its head and pending body).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Coroutine
from typing import Any

import h11
import httptools
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncdeploy.gate._client import ClientConnection, LocalAnswer
from asyncdeploy.gate._exchange import Exchange
from asyncdeploy.gate._limits import Limits
from asyncdeploy.gate._upstream import UpstreamConnection
from asyncdeploy.workload import DrainController


class HeldFront:
    """Admits every request and never opens the upstream: what would be sent stays queued."""

    def __init__(self) -> None:
        self.controller = DrainController()
        self.controller.mark_started()
        self.connections: set[ClientConnection] = set()
        self.limits = Limits(max_connections=10)

    def local(self, exchange: Exchange) -> LocalAnswer | None:
        return None

    def refusal(self, *, close: bool) -> bytes:
        return b""

    def spawn(self, function: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        pass  # the upstream is never opened

    async def connect_upstream(self) -> UpstreamConnection:
        raise OSError


def gate_frames(raw: bytes, pieces: int = 1) -> tuple[list[bytes], list[str]]:
    """What the gate would send to the engine for each request in ``raw`` (fed in ``pieces``
    parts), and the errors it would answer instead."""
    connection = ClientConnection(HeldFront())  # type: ignore[arg-type]
    size = max(1, len(raw) // pieces)
    for start in range(0, len(raw), size):
        if connection.queue and connection.queue[-1].error is not None:
            break
        connection._feed(raw[start : start + size])
    sent, errors = [], []
    for exchange in connection.queue:
        if exchange.error is not None:
            errors.append(exchange.error[1])
        elif exchange.received:
            sent.append(exchange.head_bytes() + b"".join(exchange.pending))
    return sent, errors


def h11_requests(data: bytes) -> list[tuple[bytes, bytes, list[tuple[bytes, bytes]], bytes]]:
    """Every request h11 reads in ``data`` (an error if it cannot, or bytes are left over)."""
    server = h11.Connection(h11.SERVER)
    server.receive_data(data)
    requests = []
    while True:
        event = server.next_event()
        if event is h11.NEED_DATA:
            assert not server.trailing_data[0], server.trailing_data
            return requests
        if isinstance(event, h11.Request):
            method, target, headers, body = event.method, event.target, list(event.headers), b""
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            requests.append((method, target, headers + list(event.headers), body))
            server.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
            server.send(h11.EndOfMessage())
            if server.our_state is h11.MUST_CLOSE:
                assert not server.trailing_data[0], server.trailing_data
                return requests
            server.start_next_cycle()


class Seen:
    def __init__(self) -> None:
        self.messages: list[tuple[bytes, bytes, list[tuple[bytes, bytes]], bytes]] = []
        self.target, self.headers, self.body = b"", [], b""

    def on_url(self, url: bytes) -> None:
        self.target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value.strip(b" \t")))

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.messages.append((b"", self.target, self.headers, self.body))
        self.target, self.headers, self.body = b"", [], b""


def llhttp_requests(raw: bytes) -> list[tuple[bytes, bytes, list[tuple[bytes, bytes]], bytes]]:
    seen = Seen()
    httptools.HttpRequestParser(seen).feed_data(raw)
    return seen.messages


def agree(raw: bytes, pieces: int = 1) -> None:
    """The gate sends on exactly what llhttp parsed, and h11 reads exactly that from it."""
    sent, errors = gate_frames(raw, pieces)
    try:
        expected = llhttp_requests(raw)
    except httptools.HttpParserError:
        assert errors, f"llhttp refuses {raw!r}, the gate did not"
        expected = None
    if expected is not None:
        assert not errors
        assert len(sent) == len(expected)
    for forwarded, parsed in zip(sent, expected or [], strict=False):
        (read,) = h11_requests(forwarded)  # exactly one message, nothing left over
        _, target, headers, body = read
        assert (target, body) == (parsed[1], parsed[3])
        assert [(n, v) for n, v in headers] == parsed[2]


SMUGGLING = [
    # CL + TE in every arrangement: refused (RFC 9112 6.3)
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\nabc",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\tchunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\n Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 4\r\n\r\nabcd",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -3\r\n\r\nabc",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x3\r\n\r\nabc",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\nabc",
    # chunk sizes and extensions
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;a=b;c\r\nabc\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3 ;a=b\r\nabc\r\n0\r\n\r\n",
    b'POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;a="x\r\ny"\r\nabc\r\n0\r\n\r\n',
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\nabc\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0x3\r\nabc\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n-3\r\nabc\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\n0\n\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX: 1\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r",
    # bare CR and LF, obs-fold, whitespace
    b"GET / HTTP/1.1\nHost: a\n\n",
    b"GET / HTTP/1.1\r\nHost: a\n\r\n",
    b"GET / HTTP/1.1\rHost: a\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n\tb\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX : a\r\n\r\n",
    b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET / HTTP/1.1 \r\nHost: a\r\n\r\n",
    b"GET /\x00 HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET / HTTP/1.1\r\nHo\x00st: a\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\x00b\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\x7fb\r\n\r\n",
    b"G\xe9T / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
    b"GET / HTTP/1.2\r\nHost: a\r\n\r\n",
    b"GET / http/1.1\r\nHost: a\r\n\r\n",
    b"GET / HTTP/1.1\r\n: a\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX\r\n\r\n",
    b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
    # pipelines the engine must see as the gate did
    b"GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nGET /bHTTP/1.1\r\n\r\n",
    b"GET /a HTTP/1.0\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET http://other/x HTTP/1.1\r\nHost: a\r\n\r\n",
    b"DELETE /a?b=c&d=%20 HTTP/1.1\r\nHost: a\r\n\r\n",
]


@pytest.mark.parametrize("raw", SMUGGLING)
@pytest.mark.parametrize("pieces", [1, 3, 17])
def test_smuggling_style_messages_are_refused_or_sent_on_exactly_as_llhttp_read_them(
    raw: bytes, pieces: int
) -> None:
    agree(raw, pieces)


def test_what_llhttp_refuses_is_never_sent_on() -> None:
    """A refused request goes nowhere, nor anything after it (only the requests before it)."""
    refused = 0
    for raw in SMUGGLING:
        sent, errors = gate_frames(raw)
        if errors:
            refused += 1
            seen = Seen()
            with pytest.raises(httptools.HttpParserError):
                httptools.HttpRequestParser(seen).feed_data(raw)
            assert len(sent) == len(seen.messages), raw  # those before the refused one
    assert refused >= 30  # the corpus is mostly attacks


def test_a_head_past_the_bound_is_431() -> None:
    raw = b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"x" * 70_000 + b"\r\n\r\n"
    sent, errors = gate_frames(raw, pieces=9)
    assert sent == [] and errors == ["request head longer than 65536 bytes"]


TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-!#$%&'*+.^_`|~", min_size=1, max_size=12)  # fmt: skip
VALUE = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=20)
PATH = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._~/?=&%", max_size=30).map(lambda s: "/" + s)  # fmt: skip


def chunked(pieces: list[bytes], extensions: list[str], trailers: list[tuple[str, str]]) -> bytes:
    out = b""
    for i, piece in enumerate(pieces):
        ext = f";{extensions[i % len(extensions)]}" if extensions else ""
        out += f"{len(piece):x}{ext}\r\n".encode() + piece + b"\r\n"
    return out + b"0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in trailers) + b"\r\n"


FRAMING = {"content-length", "transfer-encoding", "connection", "upgrade", "expect"}


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from(["GET", "POST", "PUT", "HEAD", "DELETE", "PATCH"]))
    headers = [(k, v) for k, v in draw(st.lists(st.tuples(TOKEN, VALUE), max_size=6))]
    headers = [(k, v) for k, v in headers if k.lower() not in FRAMING]
    head = f"{method} {draw(PATH)} HTTP/1.1\r\nHost: h\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in headers
    )
    kind = draw(st.sampled_from(["none", "length", "chunked"]))
    if kind == "length":
        body = draw(st.binary(max_size=300))
        return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    if kind == "chunked":
        pieces = draw(st.lists(st.binary(min_size=1, max_size=200), max_size=5))
        extensions = draw(st.lists(TOKEN, max_size=2))
        trailers = [
            (k, v)
            for k, v in draw(st.lists(st.tuples(TOKEN, VALUE), max_size=2))
            if k.lower() not in FRAMING
        ]
        return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + chunked(
            pieces, extensions, trailers
        )
    return (head + "\r\n").encode()


@settings(max_examples=150, deadline=None)
@given(st.lists(requests(), min_size=1, max_size=4), st.integers(min_value=1, max_value=40))
def test_any_pipeline_of_valid_requests_reaches_h11_as_llhttp_read_it(
    pipeline: list[bytes], pieces: int
) -> None:
    """Any requests (sized, chunked with extensions and trailers, none), pipelined, in any
    pieces: each sent on alone, and h11 reads from it what llhttp read from the client."""
    raw = b"".join(pipeline)
    agree(raw, pieces)
    sent, _ = gate_frames(raw, pieces)
    originals = [h11_requests(message)[0] for message in pipeline]
    for forwarded, original in zip(sent, originals, strict=True):
        (read,) = h11_requests(forwarded)
        assert read[:2] == original[:2] and read[3] == original[3]


@given(st.binary(max_size=300), st.integers(min_value=1, max_value=9))
def test_any_bytes_are_requests_or_an_error(data: bytes, pieces: int) -> None:
    """Garbage never raises: it is parsed, or answered 400."""
    for prefix in (
        b"",
        b"GET / HTTP/1.1\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
    ):
        gate_frames(prefix + data, pieces)


def test_splits_do_not_matter() -> None:
    raw = SMUGGLING[48] + SMUGGLING[49]
    results = {tuple(gate_frames(raw, n)[0]) for n in itertools.chain(range(1, 12), [40, 97])}
    assert len(results) == 1
