"""The little of HTTP/1.1 the gate must understand to pass a message through unchanged.

The gate never rewrites a body and forwards heads byte for byte; it parses only what tells it
where a message ends (RFC 9112 section 6): ``Content-Length``, ``Transfer-Encoding: chunked``
(scanned, not decoded: :class:`ChunkedScanner`), a response that runs until the connection
closes, and the messages that have no body at all. Pure functions, no I/O.
"""

from __future__ import annotations

import enum
import re

import attrs

__all__ = [
    "MAX_HEAD",
    "BodyKind",
    "ChunkedScanner",
    "HTTPParseError",
    "RequestHead",
    "ResponseHead",
    "parse_request_head",
    "parse_response_head",
    "with_connection_close",
]

MAX_HEAD = 64 * 1024
"""The largest head (request line or status line plus headers) the gate accepts."""
MAX_CHUNK_LINE = 4096

_HEX = re.compile(rb"^[0-9A-Fa-f]{1,16}$")
# A head is matched by these in C, a line at a time only on the error path: measured, the
# per-line Python of a split-and-check parser was a fifth of the gate's CPU per request.
_T = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]"
_REQUEST_LINE = re.compile(rb"(" + _T + rb"+) ([^\x00-\x20\x7f]+) (HTTP/1\.[01])\r\n")
_STATUS_LINE = re.compile(rb"(HTTP/1\.[01]) ([0-9]{3})(?: [^\r\n]*)?\r\n")
_HEADER_BLOCK = re.compile(rb"(?:" + _T + rb"+:[^\r\n]*\r\n)*")
_HEADER = re.compile(rb"(" + _T + rb"+):([^\r\n]*)\r\n")
_FRAMING = frozenset((b"content-length", b"transfer-encoding", b"connection"))


class HTTPParseError(ValueError):
    """A message the gate will not forward (the client gets 400, the upstream's reply 502)."""


class BodyKind(enum.Enum):
    NONE = "none"
    LENGTH = "length"
    CHUNKED = "chunked"
    UNTIL_CLOSE = "until-close"


HeaderFields = tuple[tuple[bytes, bytes], ...]  # (lower-case name, value), in order


def _first_line(data: bytes) -> bytes:
    return data.partition(b"\r\n")[0][:60]


def _check_head(data: bytes) -> None:
    if not data.endswith(b"\r\n\r\n"):
        raise HTTPParseError("head does not end with an empty line")
    if len(data) > MAX_HEAD:
        raise HTTPParseError(f"head longer than {MAX_HEAD} bytes")


def _headers(data: bytes, start: int) -> HeaderFields:
    """The header lines from ``start`` to the head's final empty line."""
    block = data[start:-2]
    if _HEADER_BLOCK.fullmatch(block) is None:
        for line in block.split(b"\r\n"):
            if line and _HEADER.fullmatch(line + b"\r\n") is None:
                raise HTTPParseError(f"bad header line {line[:60]!r}")
        raise HTTPParseError("bad header line")
    return tuple((name.lower(), value.strip(b" \t")) for name, value in _HEADER.findall(block))


def _framing(headers: HeaderFields) -> tuple[tuple[BodyKind, int] | None, set[bytes]]:
    """The body framing the headers declare (None when they declare none), and the
    Connection header's tokens."""
    encodings: list[bytes] = []
    lengths: list[bytes] = []
    connection: set[bytes] = set()
    for name, value in headers:
        if name not in _FRAMING:
            continue
        if name == b"content-length":
            lengths.append(value)
        elif name == b"transfer-encoding":
            encodings.extend(token.strip().lower() for token in value.split(b","))
        else:
            connection.update(token.strip().lower() for token in value.split(b","))
    if encodings:
        if lengths:  # a request smuggling vector (RFC 9112 6.3): refuse, never guess
            raise HTTPParseError("both Transfer-Encoding and Content-Length")
        if encodings[-1] != b"chunked":
            raise HTTPParseError(f"unsupported transfer coding {encodings[-1]!r}")
        return (BodyKind.CHUNKED, 0), connection
    if lengths:
        distinct = {v.strip() for value in lengths for v in value.split(b",")}
        if len(distinct) != 1:
            raise HTTPParseError("conflicting Content-Length values")
        (length,) = distinct
        if not length.isdigit() or len(length) > 18:
            raise HTTPParseError(f"bad Content-Length {length[:20]!r}")
        return (BodyKind.LENGTH, int(length)), connection
    return None, connection


def _keep_alive(version: bytes, connection: set[bytes]) -> bool:
    if b"close" in connection:
        return False
    return version == b"HTTP/1.1" or b"keep-alive" in connection


@attrs.frozen(kw_only=True)
class RequestHead:
    method: bytes
    target: bytes
    version: bytes
    headers: HeaderFields
    raw: bytes  # exactly the bytes received, forwarded as they are
    body: BodyKind
    length: int  # for BodyKind.LENGTH
    keep_alive: bool  # the client may send another request on this connection

    @property
    def path(self) -> bytes:
        return self.target.partition(b"?")[0]

    @property
    def query(self) -> bytes:
        return self.target.partition(b"?")[2]

    @property
    def expects_continue(self) -> bool:
        return any(v.lower() == b"100-continue" for k, v in self.headers if k == b"expect")


@attrs.frozen(kw_only=True)
class ResponseHead:
    version: bytes
    status: int
    headers: HeaderFields
    raw: bytes
    body: BodyKind
    length: int
    keep_alive: bool  # the connection may carry another exchange after this answer

    @property
    def interim(self) -> bool:
        """A 1xx answer: the final one follows (101 switches protocols: not interim)."""
        return 100 <= self.status < 200 and self.status != 101


def parse_request_head(data: bytes) -> RequestHead:
    """Parse a request head ending with ``\\r\\n\\r\\n``; raise :class:`HTTPParseError`."""
    _check_head(data)
    line = _REQUEST_LINE.match(data)
    if line is None:
        raise HTTPParseError(f"bad request line {_first_line(data)!r}")
    method, target, version = line.groups()
    headers = _headers(data, line.end())
    framing, connection = _framing(headers)
    if framing is None or framing == (BodyKind.LENGTH, 0):
        framing = (BodyKind.NONE, 0)  # a request without either has no body
    return RequestHead(
        method=method,
        target=target,
        version=version,
        headers=headers,
        raw=data,
        body=framing[0],
        length=framing[1],
        keep_alive=_keep_alive(version, connection),
    )


def parse_response_head(data: bytes, *, request_method: bytes = b"GET") -> ResponseHead:
    """Parse a status line and headers; the framing depends on the request's method."""
    _check_head(data)
    line = _STATUS_LINE.match(data)
    if line is None:
        raise HTTPParseError(f"bad status line {_first_line(data)!r}")
    version, status_text = line.groups()
    status = int(status_text)
    if status < 100:
        raise HTTPParseError(f"bad status {status}")
    headers = _headers(data, line.end())
    if request_method == b"HEAD" or status < 200 or status in (204, 304):
        # no body whatever the framing headers say (a HEAD's describe the GET's answer)
        connection = {
            token.strip().lower()
            for name, value in headers
            if name == b"connection"
            for token in value.split(b",")
        }
        framing: tuple[BodyKind, int] | None = (BodyKind.NONE, 0)
    else:
        framing, connection = _framing(headers)
    if framing is None:
        framing = (BodyKind.UNTIL_CLOSE, 0)
    elif framing == (BodyKind.LENGTH, 0):
        framing = (BodyKind.NONE, 0)
    return ResponseHead(
        version=version,
        status=status,
        headers=headers,
        raw=data,
        body=framing[0],
        length=framing[1],
        keep_alive=framing[0] is not BodyKind.UNTIL_CLOSE and _keep_alive(version, connection),
    )


def with_connection_close(head: ResponseHead) -> bytes:
    """The response head with ``Connection: close`` in place of any Connection header: sent
    while draining, so keep-alive clients reconnect (to another replica) for their next request."""
    first, *lines = head.raw[:-4].split(b"\r\n")
    kept = [line for line in lines if line.partition(b":")[0].strip().lower() != b"connection"]
    return b"\r\n".join([first, *kept, b"Connection: close"]) + b"\r\n\r\n"


class _Chunk(enum.Enum):
    SIZE = 1  # reading a chunk-size line
    DATA = 2  # inside chunk data
    DATA_END = 3  # the CRLF after chunk data
    TRAILER = 4  # trailer lines after the last chunk
    DONE = 5


class ChunkedScanner:
    """Finds the end of a chunked body in bytes that pass through unchanged.

    :meth:`feed` returns how many of the given bytes belong to the body (all of them until the
    end is reached); :attr:`done` is set once the last chunk and the trailers have been seen.
    """

    __slots__ = ("_line", "_remaining", "_state", "payload")

    def __init__(self) -> None:
        self._state = _Chunk.SIZE
        self._remaining = 0
        self._line = bytearray()
        self.payload = 0  # chunk-data bytes seen (the decoded body's length)

    @property
    def done(self) -> bool:
        return self._state is _Chunk.DONE

    def feed(self, data: bytes | memoryview) -> int:
        view = memoryview(data)
        pos, end = 0, len(view)
        while pos < end and self._state is not _Chunk.DONE:
            state = self._state
            if state is _Chunk.DATA:
                take = min(self._remaining, end - pos)
                pos += take
                self._remaining -= take
                self.payload += take
                if self._remaining == 0:
                    self._state = _Chunk.DATA_END
                continue
            newline = bytes(view[pos:end]).find(b"\n")
            if newline < 0:
                self._add_line(view[pos:end])
                pos = end
                break
            self._add_line(view[pos : pos + newline + 1])
            pos += newline + 1
            line = bytes(self._line)
            self._line.clear()
            self._line_done(state, line)
        return pos

    def _add_line(self, part: memoryview) -> None:
        if len(self._line) + len(part) > MAX_CHUNK_LINE:
            raise HTTPParseError("chunk line too long")
        self._line += part

    def _line_done(self, state: _Chunk, line: bytes) -> None:
        if not line.endswith(b"\r\n"):
            raise HTTPParseError("chunk line does not end with CRLF")
        line = line[:-2]
        if state is _Chunk.DATA_END:
            if line:
                raise HTTPParseError("chunk data longer than its size")
            self._state = _Chunk.SIZE
        elif state is _Chunk.SIZE:
            size = line.partition(b";")[0].strip(b" \t")
            if not _HEX.match(size):
                raise HTTPParseError(f"bad chunk size {size[:20]!r}")
            self._remaining = int(size, 16)
            self._state = _Chunk.DATA if self._remaining else _Chunk.TRAILER
        elif not line:  # state is TRAILER: the empty line ends the message
            self._state = _Chunk.DONE
