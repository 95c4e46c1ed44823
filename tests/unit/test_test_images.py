"""The test images' ``graceful`` workload (tests/images/graceful.sh): a test that signals it once
its "start" marker is written meets its TERM trap, never the shell's default.

The marker file is a FIFO nobody reads yet, so the shell stops inside the "start" write (the
kernel's ``wait_for_partner``) until the test opens it: SIGTERM sent there tells the two orders
apart every time. Written before the trap was set (as the image did until now), the signal
ended the shell 143; the engine tests saw that under load as a drain that "killed" a container
which was to drain or to ignore the signal.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

GRACEFUL = Path(__file__).parents[1] / "images" / "graceful.sh"
pytestmark = pytest.mark.skipif(
    not Path("/proc/self/wchan").exists(), reason="reads /proc/PID/wchan (Linux)"
)


def _blocked_in_the_start_write(process: subprocess.Popen[bytes]) -> None:
    wchan = Path(f"/proc/{process.pid}/wchan")
    give_up = time.monotonic() + 30
    while wchan.read_text() != "wait_for_partner":  # opening the FIFO, no reader yet
        assert process.poll() is None, process.returncode
        assert time.monotonic() < give_up, wchan.read_text()
        time.sleep(0.01)


def _read_until(fifo: Path, process: subprocess.Popen[bytes], text: bytes | None = None) -> bytes:
    """What is written to ``fifo`` until ``process`` exits or ``text`` has been read (opened
    without blocking: a writer's open then succeeds, and a dead writer leaves nothing to wait
    for)."""
    data = b""
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        give_up = time.monotonic() + 30
        while process.poll() is None and (text is None or text not in data):
            assert time.monotonic() < give_up, data
            if select.select([reader], [], [], 0.05)[0]:
                data += _read_some(reader)
        while chunk := _read_some(reader):
            data += chunk
    finally:
        os.close(reader)
    return data


def _read_some(reader: int) -> bytes:
    try:
        return os.read(reader, 4096)
    except BlockingIOError:  # a writer holds it open with nothing written yet
        return b""


@pytest.mark.parametrize("mode", ["drain", "ignore"])
def test_sigterm_at_the_start_marker_meets_the_trap(tmp_path: Path, mode: str) -> None:
    fifo = tmp_path / "markers"
    os.mkfifo(fifo)
    extra = ["ignore"] if mode == "ignore" else []
    process = subprocess.Popen(
        ["sh", str(GRACEFUL), "app", "0", *extra],
        env={"PATH": os.environ["PATH"], "MARKER_FILE": str(fifo)},
        stderr=subprocess.PIPE,
    )
    try:
        _blocked_in_the_start_write(process)
        process.send_signal(signal.SIGTERM)
        if mode == "ignore":  # it lives on past the signal, to write its start marker
            markers = _read_until(fifo, process, b"app start")
            assert b"app start" in markers and process.poll() is None, process.returncode
        else:
            markers = _read_until(fifo, process)
            assert process.returncode == 0, (process.returncode, markers)
            names = [line.split()[1] for line in markers.decode().splitlines()]
            assert names[-2:] == ["got-TERM", "drained-ok"], markers
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        assert process.stderr is not None
        process.stderr.close()
