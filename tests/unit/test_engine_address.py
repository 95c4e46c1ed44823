"""Where the Docker driver finds its engine (issue 31 item 3): the docker CLI's order, Docker's
TLS variables and file names, docker contexts read by aiodocker; without an engine.

The context files are written in the layout ``docker context create`` writes (checked against
the real docker CLI in tests/engines/test_remote_engine.py): ``contexts/meta/<sha256 of the
name>/meta.json`` and ``contexts/tls/<sha256>/docker/{ca,cert,key}.pem``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from asyncdeploy import _opening
from asyncdeploy._errors import DriverNotInstalled
from asyncdeploy.drivers.engine._address import (
    ContextError,
    EngineAddress,
    docker_address,
    plain_address,
)
from asyncdeploy.drivers.engine._docker_config import current_context
from tests.cli_runner import invoke

SOCKET = "unix:///var/run/docker.sock"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.pem, cert.pem and key.pem as ``docker-machine`` / dockerd's docs make them."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make certificates with")
    where = tmp_path_factory.mktemp("certs")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=where, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=ca",
        "-keyout", "ca-key.pem", "-out", "ca.pem")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=client", "-keyout", "key.pem",
        "-out", "client.csr")  # fmt: skip
    run("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
        "-CAcreateserial", "-days", "2", "-out", "cert.pem")  # fmt: skip
    return where


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home of its own: ``~/.docker`` is what the test writes; no DOCKER_* variable set."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for variable in ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_TLS_VERIFY",
                     "DOCKER_TLS", "DOCKER_CERT_PATH", "CONTAINER_HOST", "ASYNCDEPLOY_DRIVER"):  # fmt: skip
        monkeypatch.delenv(variable, raising=False)
    return tmp_path


def write_context(home: Path, name: str, host: str, tls: Path | None = None) -> None:
    digest = hashlib.sha256(name.encode()).hexdigest()
    meta = home / ".docker/contexts/meta" / digest
    meta.mkdir(parents=True)
    endpoint = {"Host": host, "SkipTLSVerify": False}
    document = {"Name": name, "Metadata": {}, "Endpoints": {"docker": endpoint}}
    (meta / "meta.json").write_text(json.dumps(document))
    if tls is not None:
        where = home / ".docker/contexts/tls" / digest / "docker"
        where.mkdir(parents=True)
        for file in ("ca.pem", "cert.pem", "key.pem"):
            shutil.copy(tls / file, where / file)


def use(home: Path, name: str) -> None:
    (home / ".docker").mkdir(exist_ok=True)
    (home / ".docker/config.json").write_text(json.dumps({"currentContext": name}))


def resolve(
    env: dict[str, str], url: str | None = None, context: str | None = None
) -> EngineAddress:
    return docker_address(url, context, environ=env, discovered=SOCKET)


# --- DOCKER_HOST and Docker's TLS variables -------------------------------------------------


def test_docker_host_tcp_with_tls_verify_speaks_verified_tls_on_2376(certs: Path) -> None:
    env = {
        "DOCKER_HOST": "tcp://10.0.0.5",
        "DOCKER_TLS_VERIFY": "1",
        "DOCKER_CERT_PATH": str(certs),
    }
    address = resolve(env)
    assert address.url == "https://10.0.0.5:2376"
    assert address.tls is not None and address.tls.verify_mode == ssl.CERT_REQUIRED
    assert address.tls.check_hostname
    assert address.source == "DOCKER_HOST"


def test_any_value_of_docker_tls_verify_verifies_as_the_docker_cli(certs: Path) -> None:
    """The docker CLI asks only whether the variable is set (``0`` verifies too); aiodocker
    alone would speak plain HTTP to a TLS port unless it is exactly ``1``."""
    env = {"DOCKER_HOST": "tcp://h:2376", "DOCKER_TLS_VERIFY": "0", "DOCKER_CERT_PATH": str(certs)}
    tls = resolve(env).tls
    assert tls is not None and tls.verify_mode == ssl.CERT_REQUIRED


def test_docker_tls_alone_encrypts_without_verifying(certs: Path) -> None:
    address = resolve(
        {"DOCKER_HOST": "tcp://h:2376", "DOCKER_TLS": "1", "DOCKER_CERT_PATH": str(certs)}
    )
    assert address.url == "https://h:2376"
    assert address.tls is not None and address.tls.verify_mode == ssl.CERT_NONE


def test_tcp_without_tls_is_plain_http_on_2375() -> None:
    assert resolve({"DOCKER_HOST": "tcp://h"}).url == "http://h:2375"
    assert resolve({"DOCKER_HOST": "tcp://h:1234"}).url == "http://h:1234"


def test_cert_path_defaults_to_the_docker_config_directory(home: Path, certs: Path) -> None:
    shutil.copytree(certs, home / ".docker")
    address = resolve({"DOCKER_HOST": "tcp://h:2376", "DOCKER_TLS_VERIFY": "1"})
    assert address.tls is not None


def test_unreadable_tls_files_are_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("not a certificate")
    env = {"DOCKER_HOST": "tcp://h", "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(tmp_path)}
    with pytest.raises(ValueError, match=r"TLS files in .* \(DOCKER_CERT_PATH\)"):
        resolve(env)


# --- the docker CLI's order -----------------------------------------------------------------


def test_the_current_context_of_config_json_is_used(home: Path, certs: Path) -> None:
    write_context(home, "prod", "tcp://10.0.0.9:2376", tls=certs)
    use(home, "prod")
    address = resolve({})
    assert address.url == "https://10.0.0.9:2376"
    assert address.tls is not None and address.tls.verify_mode == ssl.CERT_REQUIRED
    assert "docker context prod" in str(address) and "config.json" in str(address)


def test_docker_context_beats_config_json_and_docker_host_beats_both(home: Path) -> None:
    write_context(home, "one", "unix:///one.sock")
    write_context(home, "two", "unix:///two.sock")
    use(home, "one")
    assert resolve({}).url == "unix:///one.sock"
    assert resolve({"DOCKER_CONTEXT": "two"}).url == "unix:///two.sock"
    env = {"DOCKER_CONTEXT": "two", "DOCKER_HOST": "unix:///host.sock"}
    assert resolve(env).url == "unix:///host.sock"
    # a context named on the command line beats DOCKER_HOST (docker --context)
    assert resolve(env, context="one").url == "unix:///one.sock"
    # "default" is no context: DOCKER_HOST, else the socket
    assert resolve(env, context="default").url == "unix:///host.sock"
    assert resolve({}, context="default").url == SOCKET


def test_no_context_and_no_docker_host_is_the_local_socket(home: Path) -> None:
    assert resolve({}).url == SOCKET
    use(home, "default")
    assert resolve({}).url == SOCKET


def test_a_context_that_does_not_exist_is_a_clear_error(home: Path) -> None:
    with pytest.raises(ContextError, match="docker context nope from DOCKER_CONTEXT"):
        resolve({"DOCKER_CONTEXT": "nope"})
    with pytest.raises(ContextError, match=r"no docker context named 'nope'.*docker context ls"):
        resolve({}, context="nope")


def test_an_address_and_a_context_together_are_refused() -> None:
    with pytest.raises(ValueError, match="name one"):
        resolve({}, url="unix:///a.sock", context="prod")


def test_docker_config_elsewhere_is_said_not_silently_ignored(home: Path, tmp_path: Path) -> None:
    """aiodocker reads contexts under ~/.docker only: a context named through another
    DOCKER_CONFIG is refused with what to do, never answered by another engine."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"currentContext": "prod"}))
    env = {"DOCKER_CONFIG": str(other)}
    assert current_context(env) == "prod"
    with pytest.raises(ContextError, match="DOCKER_CONFIG"):
        resolve(env)


# --- ssh and Podman ------------------------------------------------------------------------


def test_ssh_without_the_ssh_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(DriverNotInstalled, match=r"asyncdeploy\[ssh\]"):
        resolve({"DOCKER_HOST": "ssh://user@host"})


def test_podman_takes_its_address_as_given_and_refuses_ssh() -> None:
    assert plain_address("tcp://h:8080", engine="podman").url == "http://h:8080"
    assert plain_address("unix:///run/podman/podman.sock", engine="podman").tls is None
    with pytest.raises(ValueError, match="Podman over ssh:// is not supported"):
        plain_address("ssh://core@h/run/podman/podman.sock", engine="podman")
    with pytest.raises(ValueError, match="is not an engine address"):
        plain_address("garbage://x", engine="podman")


# --- the engine choice and the command line ------------------------------------------------


def test_a_current_docker_context_names_docker(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a context in use, Docker is the engine: another engine never answers in its place."""
    assert _opening._named_by_environment() == ()
    use(home, "prod")
    assert _opening._named_by_environment() == ("docker",)
    monkeypatch.setenv("DOCKER_CONTEXT", "default")
    assert _opening._named_by_environment() == ()


def test_a_missing_context_is_exit_3_naming_it(home: Path) -> None:
    code = invoke("--docker-context", "nope", "list")
    assert code.exit_code == 3, code.output
    assert "docker context nope" in code.output and "Traceback" not in code.output


def test_a_context_whose_socket_is_missing_is_used_not_passed_over(home: Path) -> None:
    """The issue's finding: such a context was ignored and ``list`` answered from the default
    socket. Now it is the engine, and it does not answer: exit 3, naming the context."""
    write_context(home, "gone", f"unix://{home}/missing.sock")
    use(home, "gone")
    result = invoke("list")
    assert result.exit_code == 3, result.output
    assert "missing.sock" in result.output and "docker context gone" in result.output


@pytest.mark.parametrize(
    "others",
    [["--driver", "podman"], ["--driver", "kubernetes"], ["--context", "kind"], ["-n", "ml"]],
)
def test_docker_context_with_another_engines_options_is_exit_2(
    home: Path, others: list[str]
) -> None:
    result = invoke("--docker-context", "prod", *others, "list")
    assert result.exit_code == 2, result.output
    assert "--docker-context: a Docker option" in result.output


# --- delete on several engines: how they are named -----------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["delete", "-l", "app=x", "--engine", "dockr"], "name docker, podman or kubernetes"),
        (["delete", "-l", "app=x", "--engine", "podman:far"], "Podman has no contexts"),
        (["delete", "web", "--engine", "docker"], "with -l only"),
        (["--driver", "docker", "delete", "-l", "app=x", "--engine", "podman"], "with -l only"),
    ],
)
def test_engines_named_wrongly_are_exit_2(home: Path, args: list[str], said: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert said in result.output


def test_an_engine_that_cannot_be_opened_is_exit_3_before_anything_drains(home: Path) -> None:
    result = invoke("delete", "-l", "app=x", "--engine", "docker:nope", "--engine", "podman")
    assert result.exit_code == 3, result.output
    assert "docker context nope" in result.output
