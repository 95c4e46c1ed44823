"""``asyncdeploy verify``'s bad input: exit 2 and a sentence, before any engine is opened."""

from __future__ import annotations

import pytest

from tests.cli_runner import invoke

NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent.sock", "ASYNCDEPLOY_DRIVER": "docker"}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--request", "/a rate=x"], "rate='x': not a number"),
        (["--request", "v1/completions"], "expected [METHOD] /PATH"),
        (["--requests", "/nonexistent.yaml"], "No such file"),
        (["--balancer", "haproxy", "--mode", "delete-all"], "nothing to send to"),
        (["--balancer", "haproxy", "--instances", "1"], "second instance"),
        (["--wrk", "2"], "use it with a balancer"),
        (["--balancer", "envoy"], "Invalid value for '--balancer'"),
        (["--balancer", "nginx", "--nginx-config", "tuned"], "Invalid value for '--nginx-config'"),
        (["--connection", "sometimes"], "Invalid value for '--connection'"),
        (["--rise", "0", "--balancer", "haproxy"], "Invalid value for '--rise'"),
        (["--fall", "0", "--balancer", "haproxy"], "Invalid value for '--fall'"),
    ],
)
def test_bad_verify_input_is_exit_2_before_any_engine(args: list[str], says: str) -> None:
    result = invoke("verify", *args, env=NO_ENGINE)
    assert result.exit_code == 2, result.output
    assert says in result.output
