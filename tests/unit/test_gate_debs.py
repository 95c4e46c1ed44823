"""The gate image's haproxy comes from Debian's .debs, unpacked by asyncdeploy itself (what
``dpkg-deb -x`` does, so a host without dpkg builds it too): the binary and the libraries go
into the build context, nothing else; a folder without haproxy's .deb is refused."""

from __future__ import annotations

import io
import lzma
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from asyncdeploy.cli._debs import haproxy_files
from asyncdeploy.cli._recipes import recipe


def ar(members: list[tuple[str, bytes]]) -> bytes:
    out = b"!<arch>\n"
    for name, data in members:
        header = f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode()
        out += header + data + (b"\n" if len(data) % 2 else b"")
    return out


def deb(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(f"./{name}")
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return ar(
        [
            ("debian-binary", b"2.0\n"),
            ("control.tar.xz", lzma.compress(b"")),
            ("data.tar.xz", lzma.compress(buffer.getvalue())),
        ]
    )


def test_the_binary_and_the_libraries_are_taken_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "haproxy_2.6_amd64.deb").write_bytes(
        deb(
            {
                "usr/sbin/haproxy": b"ELF",
                "usr/share/doc/haproxy/README": b"doc",
                "etc/haproxy/haproxy.cfg": b"global",
            }
        )
    )
    (tmp_path / "liblua5.3-0_amd64.deb").write_bytes(
        deb(
            {"usr/lib/x86_64-linux-gnu/liblua5.3.so.0.0.0": b"ELF"},
            {"usr/lib/x86_64-linux-gnu/liblua5.3.so.0": "liblua5.3.so.0.0.0"},
        )
    )
    taken = {path: content for path, _, content in haproxy_files(sorted(tmp_path.glob("*.deb")))}
    assert taken == {
        "usr/sbin/haproxy": b"ELF",
        "usr/lib/x86_64-linux-gnu/liblua5.3.so.0.0.0": b"ELF",
        "usr/lib/x86_64-linux-gnu/liblua5.3.so.0": None,  # a symlink
    }
    made = recipe("gate", base="b", python="3.11", debs=tuple(sorted(tmp_path.glob("*.deb"))))
    with tarfile.open(fileobj=io.BytesIO(made.context([])), mode="r") as context:
        names = set(context.getnames())
    assert "build/haproxy/usr/sbin/haproxy" in names
    assert not any("share/doc" in name or "etc/haproxy" in name for name in names)


def test_without_haproxys_deb_it_is_refused(tmp_path: Path) -> None:
    (tmp_path / "liblua.deb").write_bytes(deb({"usr/lib/x86_64-linux-gnu/liblua.so.0": b""}))
    with pytest.raises(ValueError, match="no haproxy"):
        haproxy_files([tmp_path / "liblua.deb"])


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb to compare with")
def test_what_it_unpacks_is_what_dpkg_deb_unpacks(tmp_path: Path) -> None:
    data = deb({"usr/sbin/haproxy": b"ELF binary"}, {"usr/sbin/hap": "haproxy"})
    (tmp_path / "haproxy_x.deb").write_bytes(data)
    out = tmp_path / "out"
    done = subprocess.run(
        ["dpkg-deb", "-x", str(tmp_path / "haproxy_x.deb"), str(out)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"dpkg-deb refuses the synthetic .deb: {done.stderr[:200]!r}")
    assert (out / "usr/sbin/haproxy").read_bytes() == b"ELF binary"
    ((path, _, content),) = [f for f in haproxy_files([tmp_path / "haproxy_x.deb"]) if f[2]]
    assert (path, content) == ("usr/sbin/haproxy", b"ELF binary")
