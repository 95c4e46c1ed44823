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


class HeldHost:
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
    connection = ClientConnection(HeldHost())  # type: ignore[arg-type]
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


# --- the answer's side: what the engine sends, as the client gets it --------------------------
class Collecting:
    """The client side of an answer (``_upstream.Client``), keeping what it is sent."""

    def __init__(self, *, keep: bool = True) -> None:
        self.data = b""
        self.keep = keep
        self.complete: list[bool] = []
        self.failed: list[str] = []

    def keep_for(self, keep_alive: bool) -> bool:
        return self.keep and keep_alive

    def write_answer(self, data: bytes) -> None:
        self.data += data

    def response_complete(self, *, reusable: bool) -> None:
        self.complete.append(reusable)

    def upstream_failed(self, reason: str, *, answered: bool, untouched: bool) -> None:
        self.failed.append(reason)

    def upstream_full(self, full: bool) -> None:
        pass

    def switched(self, rest: bytes) -> bool:
        return False

    def tunnel_closed(self) -> None:
        pass


class NoTransport:
    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def relay_answer(
    answer: bytes, pieces: int, *, method: bytes = b"GET", keep: bool = True
) -> Collecting:
    upstream = UpstreamConnection()
    upstream.connection_made(NoTransport())  # type: ignore[arg-type]
    client = Collecting(keep=keep)
    upstream.start(client, method)
    size = max(1, len(answer) // pieces)
    for start in range(0, len(answer), size):
        if upstream.client is None:
            break
        upstream.data_received(answer[start : start + size])
    return client


def h11_answer(
    data: bytes, method: bytes = b"GET"
) -> tuple[int, list[tuple[bytes, bytes]], bytes, list[tuple[bytes, bytes]]]:
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method=method, target="/", headers=[("host", "g")]))
    client.send(h11.EndOfMessage())
    client.receive_data(data)
    status, headers, body, trailers = 0, [], b"", []
    while True:
        event = client.next_event()
        assert event is not h11.NEED_DATA
        if isinstance(event, h11.Response):
            status, headers = event.status_code, list(event.headers)
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            trailers = list(event.headers)
            assert not client.trailing_data[0]
            return status, headers, body, trailers


@st.composite
def answers(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """An answer the engine might send, and the body it carries."""
    status = draw(st.sampled_from([200, 201, 404, 500]))
    headers = [(k, v) for k, v in draw(st.lists(st.tuples(TOKEN, VALUE), max_size=4))]
    headers = [(k, v) for k, v in headers if k.lower() not in FRAMING]
    head = f"HTTP/1.1 {status} Reason Here\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" if draw(st.booleans()) else b""
    if draw(st.booleans()):
        body = draw(st.binary(max_size=300))
        return interim + (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body, body
    pieces = draw(st.lists(st.binary(min_size=1, max_size=200), max_size=5))
    extensions = draw(st.lists(TOKEN, max_size=2))
    trailers = [
        (k, v)
        for k, v in draw(st.lists(st.tuples(TOKEN, VALUE), max_size=2))
        if k.lower() not in FRAMING
    ]
    wire = (head + "Transfer-Encoding: chunked\r\n\r\n").encode()
    return interim + wire + chunked(pieces, extensions, trailers), b"".join(pieces)


@settings(max_examples=150, deadline=None)
@given(answers(), st.integers(min_value=1, max_value=30), st.booleans())
def test_any_answer_reaches_the_client_as_llhttp_read_it(
    answer: tuple[bytes, bytes], pieces: int, keep: bool
) -> None:
    """Sized or chunked (extensions, trailers), after a 100 Continue or not, in any pieces,
    kept alive or closed by the gate: the client reads the status, the fields and the body the
    engine sent, and one answer only."""
    wire, body = answer
    client = relay_answer(wire, pieces, keep=keep)
    assert client.complete == [True] and not client.failed  # the engine's connection: reusable
    data = client.data
    if data.startswith(b"HTTP/1.1 100 "):
        data = data.split(b"\r\n\r\n", 1)[1]
    status, headers, read, _ = h11_answer(data)
    assert read == body and status in (200, 201, 404, 500)
    assert ((b"connection", b"close") in headers) is not keep


def test_a_head_answer_ends_at_its_head_and_its_connection_is_not_reused() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n"
    client = relay_answer(answer, 2, method=b"HEAD")
    assert client.complete == [False]
    assert h11_answer(client.data, b"HEAD")[2] == b""


def test_bytes_past_the_answer_are_never_passed_on() -> None:
    """An engine that sends more than its answer: the client gets the answer alone, and the
    connection is not used again."""
    for answer in (
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbad",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nHTTP/1.1 500 X\r\n\r\n",
    ):
        for pieces in (1, 3, 7):
            client = relay_answer(answer, pieces)
            assert client.complete == [False], (answer, pieces)
            assert h11_answer(client.data)[2] == b"ok"
            assert b"bad" not in client.data and b" 500 " not in client.data
