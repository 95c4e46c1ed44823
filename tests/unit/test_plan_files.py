"""Plans read the way kubectl reads ``-f``, every problem at once at its file and line; result
files checked before the work. No engine: each refusal comes before any is touched."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncdeploy._errors import PlanError
from asyncdeploy.plan import read_plans
from tests.cli_runner import invoke

PLAN = "name: {name}\ncontainers:\n  - name: server\n    image: busybox:1\n"
# no engine anywhere: a command that got past reading its plans would exit 3, not 2
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent.sock", "ASYNCDEPLOY_DRIVER": "docker"}


def test_several_documents_folders_stdin_and_repeated_files(tmp_path: Path) -> None:
    (tmp_path / "two.yaml").write_text(PLAN.format(name="a") + "---\n" + PLAN.format(name="b"))
    folder = tmp_path / "more"
    folder.mkdir()
    (folder / "c.yml").write_text(PLAN.format(name="c"))
    (folder / "d.json").write_text('{"name": "d", "containers": [{"name": "s", "image": "x"}]}')
    (folder / "notes.txt").write_text("not a plan")
    stdin = io.BytesIO(("---\n" + PLAN.format(name="e") + "---\n").encode())
    plans = read_plans([tmp_path / "two.yaml", folder, "-"], stdin=stdin)
    assert [p.name for p in plans] == ["a", "b", "c", "d", "e"]


BROKEN = """\
name: llm
termination_grace_period_second: 30
containers:
  - name: server
    image: Busybox
    ports: [{container_port: 99999}]
    resources: {memory: lots}
  - name: other
"""


def test_every_problem_at_once_each_at_its_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(BROKEN)
    result = invoke("create", "-f", str(path), env=NO_ENGINE)
    assert result.exit_code == 2, result.output
    lines = result.output.removeprefix("Error: ").splitlines()
    assert lines == [
        (
            f"{path}:2: termination_grace_period_second: unknown field "
            "(did you mean termination_grace_period_seconds?)"
        ),
        f"{path}:5: containers[0].image: 'Busybox' is not a valid image reference: "
        + lines[1].partition("is not a valid image reference: ")[2],
        (
            f"{path}:6: containers[0].ports[0].container_port: must be a port number 1-65535, "
            "got 99999"
        ),
        f"{path}:7: containers[0].resources.memory: "
        + lines[3].partition("containers[0].resources.memory: ")[2],
        f"{path}:8: containers[1].image: is required",
    ], result.output
    assert "Busybox" in lines[1] and "lots" in lines[3]


def test_problems_of_several_files_and_json_output(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: A\ncontainers: []\n")
    (tmp_path / "b.yaml").write_text(PLAN.format(name="ok") + "---\n" + PLAN.format(name="ok"))
    result = invoke("create", "-o", "json", "-f", str(tmp_path), env=NO_ENGINE)
    assert result.exit_code == 2
    import json

    [problems] = [json.loads(line)["error"]["problems"] for line in result.stdout.splitlines()]
    assert [(Path(p["file"]).name, p["line"], p["path"]) for p in problems] == [
        ("a.yaml", 1, "name"),
        ("a.yaml", 2, "containers"),
        ("b.yaml", 6, "name"),
    ]
    assert "is the name of another plan too" in problems[2]["message"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "the file is empty"),
        ("# only a comment\n", "the file is empty"),
        (
            "- name: a\n",
            ":1: a plan is a mapping (name:, containers:, ...), but this document is a list",
        ),
        ("just words\n", "but this document is a string"),
        ("name: [\n", ":2: not valid YAML or JSON"),
    ],
)
def test_empty_and_non_mapping_files_say_so_in_words(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    result = invoke("create", "-f", str(path), env=NO_ENGINE)
    assert result.exit_code == 2 and words in result.output and str(path) in result.output
    assert "NoneType" not in result.output and "<unicode string>" not in result.output


def test_create_reads_stdin(tmp_path: Path) -> None:
    result = CliRunnerWithInput("name: a\ncontainers: [{name: s, image: 'x y'}]\n")
    assert result.exit_code == 2
    assert "<stdin>:2: containers[0].image: 'x y' is not a valid image reference" in result.output


def CliRunnerWithInput(text: str):
    from click.testing import CliRunner

    from asyncdeploy.cli import main

    return CliRunner(env=NO_ENGINE).invoke(main, ["create", "-f", "-"], input=text)


def test_a_folder_without_plans_and_a_missing_file(tmp_path: Path) -> None:
    result = invoke("create", "-f", str(tmp_path), "-f", str(tmp_path / "nope.yaml"), env=NO_ENGINE)
    assert result.exit_code == 2
    assert f"{tmp_path}: the folder holds no .yaml, .yml or .json file" in result.output
    assert "nope.yaml" in result.output and "No such file" in result.output


def test_replace_takes_one_plan(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text(PLAN.format(name="a") + "---\n" + PLAN.format(name="b"))
    result = invoke("replace", "-f", str(path), env=NO_ENGINE)
    assert (
        result.exit_code == 2 and "replace takes one plan; the files hold 2: a, b" in result.output
    )


@given(st.text(max_size=40))
def test_any_text_is_plans_or_a_plan_error(text: str) -> None:
    problems: tuple[PlanError, ...] = ()
    try:
        read_plans(["-"], stdin=io.BytesIO(text.encode()))
    except PlanError as exc:
        problems = exc.problems
    assert all(p.source == "<stdin>" for p in problems), problems


# --- result files: checked before the work -----------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["verify", "--report", "/nonexistent-dir/r.html"],
            "the folder /nonexistent-dir does not exist",
        ),
        (["delete", "x", "--timeline", "/nonexistent-dir/t.html"], "does not exist"),
        (["delete", "x", "--timeline", "/tmp"], "it is a folder"),
        (
            ["verify", "--report", "/etc/hostname/r.json"],
            "the folder /etc/hostname is not a folder",
        ),
    ],
)
def test_a_result_file_that_cannot_be_written_is_exit_2_at_once(
    args: list[str], words: str
) -> None:
    result = invoke(*args, env=NO_ENGINE)  # no engine: the check must come first
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output


def test_a_write_that_fails_at_the_end_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from asyncdeploy.cli._common import write_output_file

    assert write_output_file("/proc/version", "x", "report") is False
    error = capsys.readouterr().err
    assert (
        error.startswith("Error: writing the report to '/proc/version' failed")
        and error.count("\n") == 1
    )
