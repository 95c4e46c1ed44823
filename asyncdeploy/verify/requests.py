"""The requests verify sends, named by the user: one line each, or a YAML/JSON file of them.

A line is shell-quoted words: an optional method, the path (with its query), then options::

    POST /v1/completions body=@req.json header='Content-Type: application/json' stream until='[DONE]' rate=4
    GET /healthz name=health rate=10 expect=204

``METHOD`` upper-case letters (default ``GET``); ``PATH`` starts with ``/``. Options:
``body=@FILE`` (a file's bytes; relative to the working directory or the requests file) or
``body=TEXT`` (``body=@@TEXT`` for a text that begins with ``@``); ``header=NAME:VALUE`` (repeatable); ``stream`` (read the answer as it comes; it is
complete when the body ends cleanly, and with ``until=TEXT`` only once that text arrived, e.g.
``[DONE]`` or ``event: done``); ``rate=N`` requests per second (default 1); ``expect=CODE``
(default: any 2xx); ``name=NAME`` (the row in the report; default ``METHOD PATH``).

A requests file is a list whose items are such lines or mappings with the same keys
(``method``, ``path``, ``body``, ``body_file``, ``headers`` (a mapping), ``stream``, ``until``,
``rate``, ``expect``, ``name``).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from asyncdeploy._errors import AsyncDeployError, PlanError
from asyncdeploy.plan._documents import load_document

__all__ = [
    "RequestSpec",
    "RequestSpecError",
    "load_requests_file",
    "parse_request",
    "parse_requests_document",
]

_METHOD = re.compile(r"[A-Z]{1,16}")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}")  # RFC 9110 token
_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,64}")
MAX_RATE = 1000.0
MAX_BODY = 64 * 1024 * 1024


class RequestSpecError(AsyncDeployError, ValueError):
    """A request line or requests file cannot be understood; the message says which part."""


def _check_path(path: str) -> None:
    if not path.startswith("/") or any(c.isspace() or ord(c) < 0x20 or c == "\x7f" for c in path):
        raise RequestSpecError(f"path {path!r}: must start with / and hold no space or control")


def _check_header(name: str, value: str) -> None:
    if not _HEADER_NAME.fullmatch(name):
        raise RequestSpecError(f"header name {name!r}: not an HTTP token")
    if any(c in "\r\n\x00" for c in value):
        raise RequestSpecError(f"header {name}: the value holds a line break or NUL")


@attrs.frozen(kw_only=True)
class RequestSpec:
    """One kind of request, sent ``rate`` times a second while verify runs."""

    method: str = "GET"
    path: str = "/"
    name: str | None = None
    body: bytes | None = None
    body_file: str | None = None  # read by :meth:`with_body`; the line keeps the reference
    headers: tuple[tuple[str, str], ...] = ()
    stream: bool = False
    until: str | None = None
    rate: float = 1.0
    expect: int | None = None

    def __attrs_post_init__(self) -> None:
        if not _METHOD.fullmatch(self.method):
            raise RequestSpecError(f"method {self.method!r}: upper-case letters, e.g. POST")
        _check_path(self.path)
        for header_name, value in self.headers:
            _check_header(header_name, value)
        if not (math.isfinite(self.rate) and 0 <= self.rate <= MAX_RATE):
            raise RequestSpecError(f"rate {self.rate!r}: a number of requests per second, 0-1000")
        if self.expect is not None and not 100 <= self.expect <= 599:
            raise RequestSpecError(f"expect {self.expect}: an HTTP status, 100-599")
        if self.until is not None and not self.until:
            raise RequestSpecError("until: an empty text always matches; leave it out")
        if self.name is not None and not _NAME.fullmatch(self.name):
            raise RequestSpecError(f"name {self.name!r}: 1-64 printable characters")
        if self.body is not None and self.body_file is not None:
            raise RequestSpecError("body: either a text or @FILE, not both")

    @property
    def label(self) -> str:
        """The report's row for this request."""
        return self.name or f"{self.method} {self.path}"

    def expected(self, status: int) -> bool:
        return status == self.expect if self.expect is not None else 200 <= status <= 299

    def content_type(self) -> str | None:
        """What to send as Content-Type when the user named none."""
        if any(n.lower() == "content-type" for n, _ in self.headers):
            return None
        if self.body is None:
            return None
        try:
            json.loads(self.body)
        except ValueError:
            return "application/octet-stream"
        return "application/json"

    def with_body(self, base: Path | None = None) -> RequestSpec:
        """The spec with ``body_file`` read (relative paths from ``base``, else the cwd)."""
        if self.body_file is None:
            return self
        path = Path(self.body_file)
        if base is not None and not path.is_absolute():
            path = base / path
        try:
            if path.stat().st_size > MAX_BODY:
                raise RequestSpecError(f"body=@{self.body_file}: larger than 64 MiB")
            data = path.read_bytes()
        except OSError as exc:
            raise RequestSpecError(f"body=@{self.body_file}: {exc.strerror or exc}") from exc
        return attrs.evolve(self, body=data, body_file=None)

    def to_line(self) -> str:
        """The line that parses back into this spec (a loaded body is written as text)."""
        words = [self.method, self.path]
        if self.name is not None:
            words.append(f"name={self.name}")
        if self.body_file is not None:
            words.append(f"body=@{self.body_file}")
        elif self.body is not None:
            text = self.body.decode("utf-8", errors="surrogateescape")
            words.append("body=" + ("@" + text if text.startswith("@") else text))
        words += [f"header={n}:{v}" for n, v in self.headers]
        if self.stream:
            words.append("stream")
        if self.until is not None:
            words.append(f"until={self.until}")
        if self.rate != 1.0:
            words.append(f"rate={self.rate!r}")
        if self.expect is not None:
            words.append(f"expect={self.expect}")
        return " ".join(shlex.quote(w) for w in words)


def _number(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise RequestSpecError(f"{key}={text!r}: not a number") from None


def _status(text: str) -> int:
    if not text.isdigit() or len(text) != 3:
        raise RequestSpecError(f"expect={text!r}: a three-digit HTTP status")
    return int(text)


def parse_request(line: str) -> RequestSpec:
    """One request line (see the module's docstring) → :class:`RequestSpec`."""
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise RequestSpecError(f"{line!r}: {exc}") from None
    if words and _METHOD.fullmatch(words[0]) and len(words) > 1 and words[1].startswith("/"):
        method, words = words[0], words[1:]
    else:
        method = "GET"
    if not words or not words[0].startswith("/"):
        raise RequestSpecError(f"{line!r}: expected [METHOD] /PATH [OPTION...]")
    path, options = words[0], words[1:]
    fields: dict[str, Any] = {"method": method, "path": path}
    headers: list[tuple[str, str]] = []
    for word in options:
        key, eq, value = word.partition("=")
        if not eq:
            if word != "stream":
                raise RequestSpecError(f"{word!r}: unknown option (stream, or KEY=VALUE)")
            fields["stream"] = True
        elif key == "body":
            if value.startswith("@@"):  # a text that begins with @
                fields["body"] = value[1:].encode("utf-8", errors="surrogateescape")
                fields["body_file"] = None
            elif value.startswith("@"):
                if not value[1:]:
                    raise RequestSpecError("body=@: name a file")
                fields["body_file"], fields["body"] = value[1:], None
            else:
                fields["body"] = value.encode("utf-8", errors="surrogateescape")
                fields["body_file"] = None
        elif key == "header":
            header_name, colon, header_value = value.partition(":")
            if not colon:
                raise RequestSpecError(f"header={value!r}: expected NAME:VALUE")
            headers.append((header_name.strip(), header_value.strip()))
        elif key == "rate":
            fields["rate"] = _number("rate", value)
        elif key == "expect":
            fields["expect"] = _status(value)
        elif key in ("until", "name"):
            fields[key] = value
        else:
            raise RequestSpecError(
                f"{key}=: unknown option (body, header, stream, until, rate, expect, name)"
            )
    return RequestSpec(**fields, headers=tuple(headers))


_KEYS = {
    "method",
    "path",
    "name",
    "body",
    "body_file",
    "headers",
    "stream",
    "until",
    "rate",
    "expect",
}


def _from_mapping(item: Mapping[str, Any], where: str) -> RequestSpec:
    unknown = set(item) - _KEYS
    if unknown:
        raise RequestSpecError(f"{where}: unknown keys {sorted(unknown)}")
    if "path" not in item:
        raise RequestSpecError(f"{where}: path is required")
    fields: dict[str, Any] = {}
    for key in ("method", "path", "name", "until", "body_file"):
        if item.get(key) is not None:
            if not isinstance(item[key], str):
                raise RequestSpecError(f"{where}.{key}: a string")
            fields[key] = item[key]
    body = item.get("body")
    if body is not None:
        # a mapping or list is sent as JSON: the usual completion request reads naturally
        fields["body"] = (body if isinstance(body, str) else json.dumps(body)).encode()
    headers = item.get("headers") or {}
    if not isinstance(headers, Mapping) or not all(isinstance(v, str) for v in headers.values()):
        raise RequestSpecError(f"{where}.headers: a mapping of names to strings")
    fields["headers"] = tuple((str(n), v) for n, v in headers.items())
    if "stream" in item:
        if not isinstance(item["stream"], bool):
            raise RequestSpecError(f"{where}.stream: true or false")
        fields["stream"] = item["stream"]
    for key in ("rate", "expect"):
        value = item.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise RequestSpecError(f"{where}.{key}: a number")
            fields[key] = int(value) if key == "expect" else float(value)
    try:
        return RequestSpec(**fields)
    except RequestSpecError as exc:
        raise RequestSpecError(f"{where}: {exc}") from None


def parse_requests_document(text: str, source: str = "requests") -> tuple[RequestSpec, ...]:
    """A YAML or JSON list of request lines or mappings → specs (bodies not yet read)."""
    try:
        document = load_document(text, source)
    except PlanError as exc:  # the loader's message names the file and the line
        raise RequestSpecError(exc.message.replace("plan file", "requests file")) from None
    if not isinstance(document, list) or not document:
        raise RequestSpecError(f"{source}: a non-empty list of requests")
    specs = []
    for index, item in enumerate(document):
        where = f"{source}[{index}]"
        if isinstance(item, str):
            try:
                specs.append(parse_request(item))
            except RequestSpecError as exc:
                raise RequestSpecError(f"{where}: {exc}") from None
        elif isinstance(item, Mapping):
            specs.append(_from_mapping(item, where))
        else:
            raise RequestSpecError(f"{where}: a request line or a mapping")
    return tuple(specs)


def load_requests_file(path: str) -> tuple[RequestSpec, ...]:
    """Read a requests file and the bodies it names (relative to the file)."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise RequestSpecError(f"{path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError:
        raise RequestSpecError(f"{path}: not UTF-8 text") from None
    return tuple(s.with_body(file.parent) for s in parse_requests_document(text, path))
