"""The whole gate's framing (HAProxy in front, the controller beside it) against h11, by
example and by property: what keeps smuggling out.

A recording engine behind the gate parses every byte it receives with h11 (a strict,
independent parser standing in for the engine) and answers each request with its own count.
For any bytes a client sends: everything the engine receives is well-formed to h11, one
request at a time, and the client got one answer from the engine for each request the engine
read (the gate, the engine and the count in flight saw the same messages). For any pipeline
of valid requests (sized, chunked with extensions and trailers, none), the engine reads what
the client sent: same method, target and body, in order. What the gate refuses (400, 422,
501...) never reaches the engine, nor anything pipelined after it.

(Before issue 30 this file drove the hand-written relay's llhttp callbacks; the relay is gone,
so the same corpus and properties run against the whole gate on loopback.)
"""

from __future__ import annotations

import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.workload.test_gate_proxy import free_port

if not os.path.exists("/usr/sbin/haproxy"):
    pytest.skip("Debian's haproxy (ci/setup.sh installs it)", allow_module_level=True)


class RecordingEngine:
    """Answers every request (h11) with 200 and the count of requests it has read.

    ``settled()`` says whether it has read and answered everything sent to it: no connection
    with bytes (or an end) waiting unread, and no thread between a read and its answer. A
    thread waits for its socket to be readable before it claims it is busy, under the same
    lock the look takes, so the look cannot fall between the two."""

    def __init__(self) -> None:
        self.requests: list[tuple[bytes, bytes, bytes]] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.idle: dict[socket.socket, bool] = {}
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def settled(self) -> bool:
        with self.lock:
            if not all(self.idle.values()):
                return False
            waiting, _, _ = select.select(list(self.idle), [], [], 0)
            return not waiting

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.idle[conn] = False  # a new connection is work until its first wait
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn:
                self._parse(conn)
        finally:
            with self.lock:
                del self.idle[conn]

    def _receive(self, conn: socket.socket) -> bytes:
        with self.lock:
            self.idle[conn] = True
        readable, _, _ = select.select([conn], [], [], 10)
        with self.lock:
            self.idle[conn] = False
        if not readable:
            return b""  # ten quiet seconds: given up, as a timeout would
        try:
            return conn.recv(65536)
        except OSError:
            return b""

    def _parse(self, conn: socket.socket) -> None:
        parser = h11.Connection(h11.SERVER)
        current: list[object] = []
        while True:
            try:
                event = parser.next_event()
            except h11.RemoteProtocolError as exc:
                with self.lock:
                    self.errors.append(repr(exc))
                return
            if event is h11.NEED_DATA:
                data = self._receive(conn)
                parser.receive_data(data)
                if not data:
                    return
                continue
            if isinstance(event, h11.Request):
                current = [event.method, event.target, b""]
            elif isinstance(event, h11.Data):
                current[2] += event.data  # type: ignore[operator]
            elif isinstance(event, h11.EndOfMessage):
                method, target, body = current
                with self.lock:
                    if target != b"/health":
                        self.requests.append((method, target, body))  # type: ignore[arg-type]
                    count = len(self.requests)
                answer = b"engine %d" % count
                try:
                    conn.sendall(parser.send(h11.Response(status_code=200, headers=[
                        ("content-length", str(len(answer))), ("x-engine", "1")])))  # fmt: skip
                    conn.sendall(parser.send(h11.Data(data=answer)))
                    conn.sendall(parser.send(h11.EndOfMessage()))
                except (OSError, h11.LocalProtocolError):
                    return
                if parser.our_state is h11.MUST_CLOSE:
                    return
                parser.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed):
                return


@pytest.fixture(scope="module")
def engine() -> RecordingEngine:
    return RecordingEngine()


@pytest.fixture(scope="module")
def gate_port(engine: RecordingEngine) -> Iterator[int]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "asyncdeploy.gate", "--listen-host", "127.0.0.1",
         "--listen", str(port), "--upstream", str(engine.port), "--check-interval", "0.1",
         "--header-timeout", "1s", "--idle-timeout", "0.25s", "--log-level", "WARNING",
         "--propagation-wait", "0"],  # (no balancer to wait for at the end)
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if b" 200 " in send(port, b"GET /ready HTTP/1.1\r\nHost: a\r\n\r\n"):
                    break
            except OSError:
                pass
            time.sleep(0.05)
        else:
            raise AssertionError("the gate never became ready")
        yield port
    finally:
        process.terminate()
        process.wait(30)


def send(port: int, raw: bytes, pieces: int = 1) -> bytes:
    """``raw`` in ``pieces`` writes, then everything the gate sends back until it closes: at
    once after a refusal, at its idle timeout after the last answer, at its head timeout
    inside an unfinished message (the fixture's timeouts are short for this)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        step = max(1, -(-len(raw) // pieces))
        try:
            for i in range(0, len(raw), step):
                s.sendall(raw[i : i + step])
        except OSError:
            pass  # the gate answered (and closed) before the rest: what came back says why
        received = b""
        while True:
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                return received
            if not data:
                return received
            received += data


def engine_answers(received: bytes) -> int:
    return len(re.findall(rb"x-engine: 1", received, flags=re.IGNORECASE))


def exchange(
    engine: RecordingEngine, port: int, raw: bytes, pieces: int = 1
) -> tuple[bytes, list[tuple[bytes, bytes, bytes]]]:
    """What the client got back and what the engine read of it. The gate forwards a request
    whole (``http-buffer-request``) before it answers it, so once the gate has closed the
    client's connection whatever it forwarded is in the engine's sockets: the engine settles
    when it has read and answered that."""
    with engine.lock:
        before = len(engine.requests)
    received = send(port, raw, pieces)
    deadline = time.monotonic() + 10
    while not engine.settled():
        assert time.monotonic() < deadline, "the engine never settled"
        time.sleep(0.005)
    with engine.lock:
        return received, engine.requests[before:]


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
@pytest.mark.parametrize("pieces", [1, 17])
def test_smuggling_style_messages_reach_the_engine_as_they_reach_the_client(
    engine: RecordingEngine, gate_port: int, raw: bytes, pieces: int
) -> None:
    """Every request the engine read was well-formed to h11 and answered to the client: the
    engine and the gate framed the bytes alike (a smuggled request would be one the engine
    read and the client got no answer of the engine for)."""
    received, seen = exchange(engine, gate_port, raw, pieces)
    assert engine.errors == []
    assert len(seen) == engine_answers(received), (raw, seen, received[:300])


def test_what_the_gate_refuses_never_reaches_the_engine(
    engine: RecordingEngine, gate_port: int
) -> None:
    refused = 0
    for raw in SMUGGLING:
        received, seen = exchange(engine, gate_port, raw)
        if not received.startswith(b"HTTP/1.1 2"):
            refused += 1
            assert seen == [], raw
    assert refused >= 25  # the corpus is mostly attacks


def test_a_head_past_the_buffer_is_refused_and_never_reaches_the_engine(
    engine: RecordingEngine, gate_port: int
) -> None:
    raw = b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"x" * 70_000 + b"\r\n\r\n"
    received, seen = exchange(engine, gate_port, raw, pieces=9)
    assert seen == [] and (
        received == b"" or received.startswith((b"HTTP/1.1 400", b"HTTP/1.1 431"))
    )


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


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(requests(), min_size=1, max_size=4), st.integers(min_value=1, max_value=40))
def test_any_pipeline_of_valid_requests_reaches_the_engine_as_the_client_sent_it(
    engine: RecordingEngine, gate_port: int, pipeline: list[bytes], pieces: int
) -> None:
    raw = b"".join(pipeline)
    received, seen = exchange(engine, gate_port, raw, pieces)
    originals = []
    for message in pipeline:
        parser = h11.Connection(h11.SERVER)
        parser.receive_data(message)
        request = parser.next_event()
        body = b""
        while not isinstance(event := parser.next_event(), h11.EndOfMessage):
            if isinstance(event, h11.Data):
                body += event.data
        originals.append((request.method, request.target, body))  # type: ignore[union-attr]
    assert engine.errors == []
    # HEAD answers and bodies aside, every request reached the engine once, in order
    assert seen == originals, received[:400]


@given(st.binary(max_size=300), st.integers(min_value=1, max_value=9))
@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_any_bytes_are_answered_as_the_engine_read_them(
    engine: RecordingEngine, gate_port: int, data: bytes, pieces: int
) -> None:
    for prefix in (b"", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"):
        received, seen = exchange(engine, gate_port, prefix + data, pieces)
        assert engine.errors == []
        assert len(seen) == engine_answers(received)
