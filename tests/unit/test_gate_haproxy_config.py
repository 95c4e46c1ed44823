"""The gate's HAProxy configuration (a pure translation) is one HAProxy 2.6 accepts, for any
admin token a plan can draw or a person can set, and maps the gate's limits onto HAProxy's
settings (docs/gate.md has the table)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncdeploy.gate._haproxy import Plane, engine_down_answer, initial_map, render_config
from asyncdeploy.gate._limits import connections
from asyncdeploy.plan.gating import new_token

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
needs_haproxy = pytest.mark.skipif(
    not Path(HAPROXY).exists(), reason="Debian's haproxy (ci/setup.sh installs it)"
)


def plane(
    directory: Path, token: str | None, fds: tuple[int, int] = (3, 4), **overrides: float
) -> Plane:
    values: dict[str, float] = {
        "header_timeout": 10,
        "idle_timeout": 120,
        "engine_timeout": 600,
        "tunnel_timeout": 3600,
    }
    values.update(overrides)
    return Plane(
        run_dir=directory,
        data_fd=fds[0],
        admin_fd=fds[1],
        upstream_host="127.0.0.1",
        upstream_port=8001,
        admin_token=token,
        connections=connections(100),
        retry_after=5,
        local_paths=("/ready", "/live", "/startup", "/-/metrics"),
        **values,  # type: ignore[arg-type]
    )


def accepted(
    directory: Path, token: str | None, protocol: str = "http1"
) -> subprocess.CompletedProcess[str]:
    """``haproxy -c`` on the configuration, with the listening sockets it names."""
    with (
        socket.create_server(("127.0.0.1", 0)) as data,
        socket.create_server(("127.0.0.1", 0)) as admin,
    ):
        config = attrs.evolve(
            plane(directory, token, (data.fileno(), admin.fileno())), upstream_protocol=protocol
        )
        config.config_file.write_text(render_config(config))
        config.map_file.write_text(initial_map())
        config.engine_down_file.write_text(engine_down_answer())
        return subprocess.run(
            [HAPROXY, "-c", "-q", "-f", str(config.config_file)],
            capture_output=True,
            text=True,
            check=False,
            pass_fds=(data.fileno(), admin.fileno()),
        )


@needs_haproxy
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    token=st.one_of(
        st.builds(lambda _: new_token(), st.integers()),
        st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40),
    )
)
def test_any_token_makes_a_configuration_haproxy_accepts(token: str) -> None:
    """A drawn token starts with '-' one time in 64 (HAProxy read it as an ACL option)."""
    with tempfile.TemporaryDirectory() as directory:
        result = accepted(Path(directory), token)
        assert result.returncode == 0, result.stdout + result.stderr


@needs_haproxy
def test_a_token_beginning_with_a_dash_is_a_pattern(tmp_path: Path) -> None:
    result = accepted(tmp_path, "-37xxKnxLfdu3W3pOkp4B_TP")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_limits_map_onto_haproxys_timeouts(tmp_path: Path) -> None:
    text = render_config(plane(tmp_path, None, header_timeout=1.5, idle_timeout=2))
    assert "timeout http-request 1500ms" in text
    assert "timeout http-keep-alive 2000ms" in text
    assert "timeout client 2000ms" in text
    assert "timeout server 600000ms" in text
    assert "timeout tunnel 3600000ms" in text


@needs_haproxy
def test_an_h2c_engine_is_spoken_to_in_http2_and_haproxy_accepts_it(tmp_path: Path) -> None:
    assert accepted(tmp_path, "t", protocol="h2c").returncode == 0
    config = render_config(attrs.evolve(plane(tmp_path, "t"), upstream_protocol="h2c"))
    assert "    server e 127.0.0.1:8001 proto h2\n" in config
    assert "    server e 127.0.0.1:8001\n" in render_config(plane(tmp_path, "t"))
