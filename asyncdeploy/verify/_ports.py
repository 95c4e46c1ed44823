"""Free loopback ports for the workloads verify publishes and the balancer it starts.

A port is chosen before what binds it exists (a balancer is told every server's address when
it starts, the successor's too), so another program may take it between the look and the
bind. The kernel's own picks come from its ephemeral range: a bind to port 0 and the source
port of every outgoing connection (a run's own traffic opens thousands). Below that range a
port is taken only by a program that names it, so the port is drawn at random there and
tried. (A port from the range was taken so once: an engine refused to publish it, "address
already in use".) A port that can be bound may still be in use: a published port that no
process listens on, only the firewall forwards (Docker with ``userland-proxy: false``, a
Kubernetes hostPort through the CNI portmap plugin), is seen by connecting to it: a port
nothing holds refuses at once. The probe waits up to ``PROBE_SECONDS``: call ``free_port``
off the event loop.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port", "unclaimed_ports"]

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_EPHEMERAL_RANGE = (32768, 60999)  # Linux's default; below macOS's (49152-65535) too
LOWEST = 10000  # below: well-known and commonly configured services
TRIES = 50
PROBE_SECONDS = 0.05  # loopback refuses within microseconds; a forwarded port may not answer


def unclaimed_ports(ephemeral_range_text: str | None) -> range:
    """The ports below the kernel's ephemeral range (``ip_local_port_range``'s text; None:
    not readable), from ``LOWEST`` on; empty when the range leaves fewer than 1,000."""
    low = LINUX_EPHEMERAL_RANGE[0]
    if ephemeral_range_text is not None:
        try:
            low = int(ephemeral_range_text.split()[0])
        except (ValueError, IndexError):
            pass
    return range(LOWEST, low) if low - LOWEST >= 1000 else range(0)


def _ephemeral_range_text() -> str | None:
    try:
        return EPHEMERAL_RANGE_FILE.read_text()
    except OSError:
        return None


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _refused(port: int) -> bool:
    """Whether a connection to the port is refused (nothing there, nothing forwarding it);
    accepted, or unanswered within ``PROBE_SECONDS`` (forwarded somewhere), it is in use."""
    with socket.socket() as probe:
        probe.settimeout(PROBE_SECONDS)
        try:
            probe.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return True
        except OSError:  # timed out: forwarded to something that does not answer yet
            return False
        return False


def free_port() -> int:
    """A loopback port nothing holds or forwards, from below the ephemeral range when it can
    be (else the kernel's pick). Blocks up to ``PROBE_SECONDS`` a try."""
    candidates = unclaimed_ports(_ephemeral_range_text())
    if candidates:
        for port in random.sample(candidates, min(TRIES, len(candidates))):
            if _bindable(port) and _refused(port):
                return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
