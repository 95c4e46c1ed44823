"""The README's verify snippets (docs/verify.md), run as written.

``ASYNCDEPLOY_TEST_DEMO_IMAGE`` (a branch's own build of the demo server) adds ``--image`` and
``--pause-image`` to the commands; without it they run verbatim against the registry
(127.0.0.1:5000) that ci/setup.sh fills.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest

from asyncdeploy.verify.requests import load_requests_file
from tests.cli_runner import invoke_in_thread
from tests.engines.conftest import PAUSE

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.engine]

DOC = Path(__file__).parents[2] / "docs" / "verify.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def _commands() -> list[tuple[list[str], int]]:
    """Each `asyncdeploy verify` command of the sh blocks, and the exit it says (default 0)."""
    found = []
    for block in _blocks("sh"):
        for command in block.replace("\\\n", " ").splitlines():
            words = shlex.split(command, comments=False)
            if words[:2] != ["asyncdeploy", "verify"]:
                continue
            expected = 0
            if "#" in words:
                comment = words[words.index("#") :]
                words = words[: words.index("#")]
                expected = 1 if comment == ["#", "exit", "1"] else 0
            found.append((words[1:], expected))
    return found


def test_the_doc_has_the_commands() -> None:
    commands = _commands()
    assert len(commands) == 3
    assert [expected for _, expected in commands] == [0, 1, 0]


@pytest.mark.parametrize("index", [0, 1, 2])
async def test_each_verify_command_runs_as_written(index: int, tmp_path: Path) -> None:
    if shutil.which("haproxy") is None:
        pytest.fail("the snippets need haproxy (apt-get install haproxy)")
    words, expected = _commands()[index]
    image = os.environ.get("ASYNCDEPLOY_TEST_DEMO_IMAGE")
    if image is not None:
        words += ["--image", image, "--pause-image", PAUSE]
        at = words.index("--registry")
        del words[at : at + 2]
    if "--report" in words:
        words[words.index("--report") + 1] = str(tmp_path / "report.html")
    result = await invoke_in_thread("--driver", "docker", *words, "-o", "json")
    assert result.exit_code == expected, result.output[-3000:]
    report = json.loads(result.stdout)
    if expected == 1:
        assert any(row.get("refused", 0) for row in report["counts"].values()), report["counts"]
    if "--request" in words:
        assert set(report["counts"]) == {"GET /short", "stream"}
        assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_the_requests_file_reads_as_written(tmp_path: Path) -> None:
    [block] = _blocks("yaml")
    (tmp_path / "requests.yaml").write_text(block)
    (tmp_path / "completion.json").write_text('{"model": "m", "prompt": "hi", "stream": true}')
    completion, chat, health = load_requests_file(str(tmp_path / "requests.yaml"))
    assert (completion.method, completion.path, completion.until) == (
        "POST",
        "/v1/completions",
        "[DONE]",
    )
    assert completion.body is not None and json.loads(completion.body)["stream"] is True
    assert chat.stream and json.loads(chat.body or b"")["messages"][0]["content"] == "hi"
    assert health.label == "health" and health.rate == 5
