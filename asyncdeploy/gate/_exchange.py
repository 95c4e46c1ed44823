"""One request and its answer on a client connection: the gate's per-exchange state, one value.

A client connection holds its exchanges in order (pipelined ones wait behind the one in
flight); each moves through :class:`ExchangePhase` once. What a phase means:

======== ===================================================================================
PARSING  its head is being read (llhttp has seen its first byte)
QUEUED   its head is complete; it waits behind the exchange in flight (its body, if it came
         already, waits with it, bounded)
OPENING  admitted; the upstream connection is being opened
RELAYING its head went to the engine; its body (if any is left) and the answer are relayed
LOCAL    the gate answers it itself (an asynchronous answer is being made)
CLOSING  its answer was written; the client's buffer still holds its last bytes
TUNNEL   the engine answered 101: bytes go both ways unparsed until either side closes
DONE     over (answered, refused, failed or cut)
======== ===================================================================================

Whether the client sent the whole request (``received``) is the parser's fact, apart from the
phase: an engine may answer before the request body ends.
"""

from __future__ import annotations

import enum

from asyncdeploy.workload import Admission, RequestOutcome

from ._http import Framing, HeaderFields, chunk, framing_of, last_chunk, request_head

__all__ = ["REPLAY_MAX", "Exchange", "ExchangePhase"]

REPLAY_MAX = 256 * 1024
"""The largest request (head and body) sent on a reused upstream connection: what the gate
keeps to send again if the engine closed that connection instead of answering. A larger one,
or a chunked one, gets a fresh connection."""


class ExchangePhase(enum.IntEnum):
    PARSING = 0
    QUEUED = 1
    OPENING = 2
    RELAYING = 3
    LOCAL = 4
    CLOSING = 5
    TUNNEL = 6
    DONE = 7


class Exchange:
    """A request (as llhttp parsed it) and what became of it."""

    __slots__ = (
        "admission",
        "declared",
        "error",
        "framing",
        "head_size",
        "headers",
        "keep_alive",
        "kept",
        "length",
        "method",
        "pending",
        "pending_size",
        "phase",
        "received",
        "started",
        "target",
        "trailers",
        "upgrade",
        "upgrade_rest",
        "version",
    )

    def __init__(self, started: float) -> None:
        self.phase = ExchangePhase.PARSING
        self.started = started  # its first byte: the header timeout runs from here
        self.method = b""
        self.target = b""
        self.version = "1.1"
        self.headers: HeaderFields = []
        self.trailers: HeaderFields = []
        self.head_size = 0
        self.declared = False  # a Content-Length or Transfer-Encoding field came
        self.framing = Framing.NONE
        self.length = 0
        self.keep_alive = True
        self.upgrade = False
        self.received = False  # the client sent the whole request
        #: An answer the gate makes instead of relaying (a malformed request: 400, 431).
        self.error: tuple[int, str] | None = None
        #: Body bytes (framed as they go to the engine) that came before it could be sent.
        self.pending: list[bytes] = []
        self.pending_size = 0
        #: What was sent on a reused upstream connection, until the engine's first answer byte.
        self.kept: list[bytes] | None = None
        #: Bytes the client sent after an Upgrade request: the tunnel's, or the next request's.
        self.upgrade_rest = b""
        self.admission: Admission | None = None

    @property
    def path(self) -> bytes:
        return self.target.partition(b"?")[0]

    @property
    def query(self) -> bytes:
        return self.target.partition(b"?")[2]

    @property
    def replayable(self) -> bool:
        """Small enough to keep whole, so it may go on a reused upstream connection."""
        if self.framing is Framing.NONE:
            return True
        return self.framing is Framing.LENGTH and self.head_size + self.length <= REPLAY_MAX

    def head_complete(self, method: bytes, version: str, keep_alive: bool, upgrade: bool) -> None:
        self.method, self.version = method, version
        self.keep_alive, self.upgrade = keep_alive, upgrade
        if self.declared:
            self.framing, self.length = framing_of(self.headers, response=False)
        self.phase = ExchangePhase.QUEUED

    def head_bytes(self) -> bytes:
        """The head as the engine gets it: rebuilt, in one canonical form (llhttp accepts a
        request line with two spaces, which h11 refuses: the engine never sees that)."""
        return request_head(self.method, self.target, self.version, self.headers)

    def frame(self, body: bytes) -> bytes:
        """A piece of the body as it goes to the engine."""
        return chunk(body) if self.framing is Framing.CHUNKED else body

    def end(self) -> bytes:
        """What ends the body on the wire (the last chunk and trailers; else nothing)."""
        return last_chunk(self.trailers) if self.framing is Framing.CHUNKED else b""

    def wait_with(self, data: bytes) -> None:
        if data:
            self.pending.append(data)
            self.pending_size += len(data)

    def release(self, outcome: RequestOutcome) -> None:
        admission, self.admission = self.admission, None
        if admission is not None:
            admission.release(outcome)
