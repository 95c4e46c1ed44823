"""Debian's haproxy for the gate image, fetched on the host: which packages, and their files.

The gate image's data plane is Debian bookworm's haproxy 2.6. Its ``.deb`` and those of the
libraries it links are downloaded on the host (``apt-get download``: a Debian or Ubuntu host
with a bookworm mirror) or taken from ``--debs DIR`` (a machine without a mirror: copy them
there), and unpacked here, in pure Python (a ``.deb`` is an ``ar`` archive holding
``data.tar.*``: what ``dpkg-deb -x`` reads), so any host can build the image and the build
itself stays offline. Only the binary and shared libraries are kept; the image's installer
copies a library only where the base lacks it (the base's own C library is never replaced).
"""

from __future__ import annotations

import io
import lzma
import tarfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["HAPROXY_PACKAGES", "deb_files", "haproxy_files"]

#: haproxy and the packages of every library it links (bookworm, amd64 and arm64 alike), but
#: libc6: the base's own. ``ci/build-gate-image.sh`` finds the same list with ``ldd``.
HAPROXY_PACKAGES = (
    "haproxy",
    "libcap2",
    "libcrypt1",
    "libgcc-s1",
    "libgcrypt20",
    "libgpg-error0",
    "liblua5.3-0",
    "liblz4-1",
    "liblzma5",
    "libopentracing-c-wrapper0",
    "libopentracing1",
    "libpcre2-8-0",
    "libssl3",
    "libstdc++6",
    "libsystemd0",
    "libzstd1",
)


def _ar_members(data: bytes) -> Iterator[tuple[str, bytes]]:
    if not data.startswith(b"!<arch>\n"):
        raise ValueError("not a .deb (an ar archive)")
    offset = 8
    while offset + 60 <= len(data):
        header = data[offset : offset + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        start = offset + 60
        yield name, data[start : start + size]
        offset = start + size + (size % 2)


def deb_files(deb: bytes) -> Iterator[tuple[str, tarfile.TarInfo, bytes | None]]:
    """(path, entry, content) of every file and symlink a ``.deb`` installs."""
    for name, member in _ar_members(deb):
        if not name.startswith("data.tar"):
            continue
        if name.endswith(".zst"):
            raise ValueError("a zstd-compressed .deb: unpack it with dpkg-deb -x")
        raw = lzma.decompress(member) if name.endswith(".xz") else member
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:*") as tar:
            for entry in tar:
                path = entry.name.removeprefix("./")
                if entry.isfile():
                    extracted = tar.extractfile(entry)
                    yield path, entry, extracted.read() if extracted else b""
                elif entry.issym():
                    yield path, entry, None


def haproxy_files(debs: list[Path]) -> list[tuple[str, tarfile.TarInfo, bytes | None]]:
    """What the gate image takes from the ``.deb`` files: ``usr/sbin/haproxy`` and the shared
    libraries (their symlinks too), under ``haproxy/`` in the build context."""
    kept = []
    for deb in sorted(debs):
        for path, entry, content in deb_files(deb.read_bytes()):
            library = "-linux-gnu/" in path and ".so" in path.rsplit("/", 1)[-1]
            if path == "usr/sbin/haproxy" or library:
                kept.append((path, entry, content))
    if not any(path == "usr/sbin/haproxy" for path, _, _ in kept):
        raise ValueError("no haproxy_*.deb among the .debs given")
    return kept
