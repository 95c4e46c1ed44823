"""The demo image's source hash is the sources', not the checkout's path: a clone at another
path reuses the image instead of rebuilding it (ci/build-demo-image.sh --source-hash)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).parents[2]


def checkout(at: Path) -> Path:
    (at / "ci").mkdir(parents=True)
    shutil.copytree(
        REPO / "asyncdeploy", at / "asyncdeploy", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(REPO / "pyproject.toml", at / "pyproject.toml")
    shutil.copy(REPO / "ci" / "build-demo-image.sh", at / "ci" / "build-demo-image.sh")
    return at


def source_hash(repo: Path) -> str:
    done = subprocess.run(
        ["bash", str(repo / "ci" / "build-demo-image.sh"), "--source-hash"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    return done.stdout.strip()


def test_two_checkouts_at_different_paths_have_one_hash(tmp_path: Path) -> None:
    one = checkout(tmp_path / "a")
    two = checkout(tmp_path / "somewhere" / "else" / "asyncdeploy")
    first = source_hash(one)
    assert len(first) == 16 and int(first, 16) >= 0
    assert source_hash(two) == first
    # the negative control: a change to the sources is a new hash
    with (two / "asyncdeploy" / "labels.py").open("a") as f:
        f.write("# changed\n")
    assert source_hash(two) != first
