"""What the built-in images are made of, from the installed package: pure apart from reading
the package's own files.

Each image is a Debian-like Python base (``--base``, default the official ``python`` image of
the host's Python version) plus wheels downloaded on the host (the build's steps have no
network) plus this installed ``asyncdeploy`` package, unpacked by a small installer into the
base interpreter's ``purelib``. ``ci/build-gate-image.sh`` and ``ci/build-demo-image.sh`` make
the same images for the project's tests from a checkout: the requirement lists and commands
here and there agree (``tests/unit/test_image_recipes.py``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import re
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import attrs

import asyncdeploy
from asyncdeploy.builtin_images import BuiltIn
from asyncdeploy.cli._debs import haproxy_files

__all__ = [
    "DEMO_REQUIREMENTS",
    "GATE_REQUIREMENTS",
    "HASH_LABEL",
    "Recipe",
    "default_base",
    "recipe",
]

HASH_LABEL = "io.asyncdeploy.image.source-hash"
GATE_REQUIREMENTS = ("anyio", "attrs", "uvloop")
"""The gate controller's runtime (uvloop: its faster loop); ``REQS`` in ci/build-gate-image.sh.
Its data plane, Debian's haproxy, comes as ``.deb`` files (:mod:`._debs`)."""
DEMO_REQUIREMENTS = (
    "uvicorn",
    "h11",
    "anyio",
    "attrs",
    "click",
    "sniffio",
    "idna",
    "typing_extensions",
)
"""The kit and uvicorn, plus every core dependency (``import asyncdeploy`` works in the image)."""

_COMMANDS: dict[BuiltIn, tuple[int, list[str], list[str]]] = {
    # kind: (the port it serves on, ENTRYPOINT, CMD): as the ci scripts build them
    "gate": (
        8000,
        ["python3", "-m", "asyncdeploy.gate"],
        ["--listen", "8000", "--upstream", "8001"],
    ),
    "demo": (
        8080,
        [],
        [
            "python3",
            "-m",
            "asyncdeploy.workload.demo",
            "--port",
            "8080",
            "--control-socket",
            "/run/asyncdeploy/control.sock",
        ],
    ),
}
_CHECKS: dict[BuiltIn, str] = {
    "gate": "import asyncdeploy.gate, asyncdeploy.gate.__main__, uvloop",
    "demo": "import asyncdeploy, asyncdeploy.workload.demo, asyncdeploy.workload.drain_cmd",
}

# Runs inside the build (RUN, no network): unpacks the wheels and the package into the base
# interpreter's purelib, whatever the distribution calls it, and checks the imports.
_INSTALLER = r"""
import compileall, os, shutil, subprocess, sys, sysconfig, zipfile
want, check, run_dir = sys.argv[1], sys.argv[2], sys.argv[3]
have = "%d.%d" % sys.version_info[:2]
if have != want:
    sys.exit(f"the base image runs Python {have}; the wheels are for {want}: "
             f"asyncdeploy images build --python-version {have}")
site = sysconfig.get_paths()["purelib"]
os.makedirs(site, exist_ok=True)
here = os.path.dirname(os.path.abspath(__file__))
for name in sorted(os.listdir(os.path.join(here, "wheels"))):
    zipfile.ZipFile(os.path.join(here, "wheels", name)).extractall(site)
shutil.copytree(os.path.join(here, "site"), site, dirs_exist_ok=True)
compileall.compile_dir(os.path.join(site, "asyncdeploy"), quiet=1)
haproxy = os.path.join(here, "haproxy")
if os.path.isdir(haproxy):  # Debian's haproxy and the libraries the base lacks
    shutil.copy2(os.path.join(haproxy, "usr/sbin/haproxy"), "/usr/sbin/haproxy")
    for root, _, names in os.walk(haproxy):
        for name in names:
            source = os.path.join(root, name)
            relative = os.path.relpath(source, haproxy)
            if relative == "usr/sbin/haproxy":
                continue
            parts = relative.split("/")  # [usr/]lib/<triplet>/<rest>
            at = next(i for i, part in enumerate(parts) if part.endswith("-linux-gnu"))
            triplet, rest = parts[at], "/".join(parts[at + 1 :])
            if any(os.path.lexists(os.path.join(d, triplet, rest)) for d in ("/lib", "/usr/lib")):
                continue  # the base's own, never replaced
            target = os.path.join("/usr/lib", triplet, rest)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.islink(source):
                os.symlink(os.readlink(source), target)
            else:
                shutil.copy2(source, target)
    subprocess.run(["/usr/sbin/haproxy", "-vv"], check=True, stdout=subprocess.DEVNULL)
subprocess.run([sys.executable, "-c", check], check=True)  # as the image will run it
if run_dir:
    os.makedirs(run_dir, mode=0o700, exist_ok=True)
    os.chmod(run_dir, 0o700)
"""


def python_version() -> str:
    """The host's Python as ``X.Y``: the default of the images' Python."""
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def default_base(version: str) -> str:
    """The base image unless ``--base`` says otherwise: the official Python image on Debian."""
    return f"docker.io/library/python:{version}-slim-bookworm"


def _core_requirements() -> list[str]:
    """The installed package's own dependencies (no extras) and its ``demo`` extra's."""
    try:
        declared = importlib.metadata.requires("asyncdeploy") or []
    except importlib.metadata.PackageNotFoundError:
        return []
    wanted = []
    for line in declared:
        requirement, _, marker = line.partition(";")
        if not marker.strip() or re.search(r"""extra\s*==\s*["']demo["']""", marker):
            wanted.append(requirement.strip())
    return wanted


def package_version() -> str:
    try:
        return importlib.metadata.version("asyncdeploy")
    except importlib.metadata.PackageNotFoundError:
        return asyncdeploy.__version__


def _package_files() -> Iterator[tuple[str, Path]]:
    """(name in the image, file) of every file of the installed package, sorted."""
    root = Path(asyncdeploy.__file__).resolve().parent
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            yield f"asyncdeploy/{path.relative_to(root).as_posix()}", path


@attrs.frozen(kw_only=True)
class Recipe:
    """One built-in image: what it needs, how it starts, and its build context."""

    kind: BuiltIn
    base: str
    python: str
    requirements: tuple[str, ...]
    #: The gate's haproxy ``.deb`` files (``_debs.haproxy_files`` takes what it needs).
    debs: tuple[Path, ...] = ()

    def dockerfile(self) -> str:
        port, entrypoint, command = _COMMANDS[self.kind]
        run_dir = "/run/asyncdeploy" if self.kind == "demo" else ""
        lines = [
            f"FROM {self.base}",
            "COPY build/ /tmp/asyncdeploy-build/",
            "RUN python3 /tmp/asyncdeploy-build/install.py "
            + " ".join(json.dumps(x) for x in (self.python, _CHECKS[self.kind], run_dir))
            + " && rm -rf /tmp/asyncdeploy-build",
            "ENV PYTHONUNBUFFERED=1",
            f"EXPOSE {port}",
            "STOPSIGNAL SIGTERM",
        ]
        if entrypoint:
            lines.append(f"ENTRYPOINT {json.dumps(entrypoint)}")
        lines.append(f"CMD {json.dumps(command)}")
        return "\n".join(lines) + "\n"

    def source_hash(self, wheels: list[Path]) -> str:
        """The image's inputs in 16 hex digits: equal inputs, an image left as it is."""
        digest = hashlib.sha256(self.dockerfile().encode())
        digest.update(_INSTALLER.encode())
        for name, path in _package_files():
            digest.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
        for wheel in sorted(wheels):
            digest.update(wheel.name.encode() + b"\0")
        for deb in sorted(self.debs):
            digest.update(deb.name.encode() + b"\0")
        return digest.hexdigest()[:16]

    def context(self, wheels: list[Path]) -> bytes:
        """The build context: a tar of the Dockerfile, the installer, the wheels, the package."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:

            def add(name: str, data: bytes) -> None:
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))

            add("Dockerfile", self.dockerfile().encode())
            add("build/install.py", _INSTALLER.encode())
            for wheel in sorted(wheels):
                add(f"build/wheels/{wheel.name}", wheel.read_bytes())
            for name, path in _package_files():
                add(f"build/site/{name}", path.read_bytes())
            for deb_path, entry, content in haproxy_files(list(self.debs)) if self.debs else []:
                info = tarfile.TarInfo(f"build/haproxy/{deb_path}")
                info.mtime = 0
                if content is None:
                    info.type, info.linkname = tarfile.SYMTYPE, entry.linkname
                    tar.addfile(info)
                else:
                    info.size, info.mode = len(content), entry.mode
                    tar.addfile(info, io.BytesIO(content))
            version = package_version()
            metadata = f"Metadata-Version: 2.1\nName: asyncdeploy\nVersion: {version}\n"
            add(f"build/site/asyncdeploy-{version}.dist-info/METADATA", metadata.encode())
            add(f"build/site/asyncdeploy-{version}.dist-info/INSTALLER", b"asyncdeploy-images\n")
        return buffer.getvalue()


def recipe(
    kind: BuiltIn, *, base: str | None, python: str | None, debs: tuple[Path, ...] = ()
) -> Recipe:
    """The recipe of ``kind`` for this installed package (``debs``: the gate's haproxy)."""
    version = python or python_version()
    if kind == "gate":
        requirements = list(GATE_REQUIREMENTS)
    else:
        requirements = [*DEMO_REQUIREMENTS, *_core_requirements()]
    return Recipe(
        kind=kind,
        base=base or default_base(version),
        python=version,
        requirements=tuple(dict.fromkeys(requirements)),
        debs=debs if kind == "gate" else (),
    )
