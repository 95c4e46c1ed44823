"""Podman's socket is found as Podman's own tools find it (``_podman.podman_socket``)."""

from __future__ import annotations

from asyncdeploy.drivers.engine._podman import podman_socket


def test_container_host_comes_first_for_root_and_users() -> None:
    env = {"CONTAINER_HOST": "ssh://core@host/run/podman/podman.sock", "XDG_RUNTIME_DIR": "/r"}
    assert podman_socket(env, 0) == env["CONTAINER_HOST"]
    assert podman_socket(env, 1000) == env["CONTAINER_HOST"]


def test_a_user_gets_the_rootless_socket_even_before_its_service_runs() -> None:
    """The error then names the socket the user's own Podman would use, not root's."""
    assert podman_socket({"XDG_RUNTIME_DIR": "/run/user/1000"}, 1000) == (
        "unix:///run/user/1000/podman/podman.sock"
    )
    assert podman_socket({}, 1001) == "unix:///run/user/1001/podman/podman.sock"


def test_root_gets_the_rootful_socket_whatever_its_runtime_dir() -> None:
    assert podman_socket({"XDG_RUNTIME_DIR": "/run/user/0"}, 0) == "unix:///run/podman/podman.sock"
    assert podman_socket({}, 0) == "unix:///run/podman/podman.sock"
