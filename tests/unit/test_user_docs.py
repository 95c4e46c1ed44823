"""A user's docs: a docstring on every exported name and on every public method of an exported
class (read through ``asyncdeploy.__all__``, whatever builds that table); docs/cli.md without
working notes; one Unreleased section in the CHANGELOG and no internal numbering; and
``delete_all()`` with no selector refused, as the CLI refuses ``delete-all`` alone."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import asyncdeploy
from asyncdeploy import Deployer, SelectorError
from tests.unit.test_deployer_events import DrainingDriver

ROOT = Path(__file__).resolve().parents[2]


def _documented(obj: object) -> bool:
    doc = inspect.getdoc(obj)
    return bool(doc and doc.strip())


def _inherited_doc(cls: type, name: str) -> bool:
    """A method documented on a base class (``__str__`` from ``object`` does not count)."""
    return any(
        name in vars(base) and _documented(vars(base)[name])
        for base in cls.__mro__[1:]
        if base is not object
    )


def test_every_exported_name_and_public_method_has_a_docstring() -> None:
    missing = []
    for name in asyncdeploy.__all__:
        value = getattr(asyncdeploy, name)
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue  # constants and type aliases: documented where they are defined
        if not _documented(value) or (inspect.isclass(value) and value.__doc__ is None):
            missing.append(name)
        if not inspect.isclass(value) or issubclass(value, BaseException):
            continue
        for attribute, member in vars(value).items():
            if attribute.startswith("_") or (
                not callable(member) and not isinstance(member, property)
            ):
                continue
            function = member.fget if isinstance(member, property) else member
            function = getattr(function, "__func__", function)
            if not _documented(function) and not _inherited_doc(value, attribute):
                missing.append(f"{name}.{attribute}")
    assert not missing, f"no docstring: {', '.join(missing)}"


@pytest.mark.anyio
async def test_delete_all_without_a_selector_is_refused_unless_all() -> None:
    driver = DrainingDriver(events=0)
    deployer = Deployer(driver)  # type: ignore[arg-type]
    with pytest.raises(SelectorError, match="all=True"):
        await deployer.delete_all()
    with pytest.raises(SelectorError, match="all=True"):
        async with deployer.terminate_all():
            pass
    assert driver.calls == []  # refused before any engine call
    assert [s.workload for s in await deployer.delete_all(all=True)] == ["a"]
    assert driver.calls == ["find_matching", "drain"]
    with pytest.raises(SelectorError, match="not both"):
        await deployer.delete_all({"team": "ml"}, all=True)


def test_the_cli_page_holds_no_working_notes() -> None:
    page = (ROOT / "docs" / "cli.md").read_text()
    for note in (
        "Papercuts",
        "answers for the README",
        "Not done here",
        "replace the README",
        "(was ",
    ):
        assert note not in page, note
    for command in ("images build", "exec -it", "wait", "version", "--ignore-not-found", "-f -"):
        assert command in page, command


def test_the_changelog_has_one_unreleased_section_and_no_internal_numbers() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    sections = re.findall(r"^## (.*)$", text, re.MULTILINE)
    assert sections[0] == "[Unreleased]" and sum("Unreleased" in s for s in sections) == 1
    assert all(re.fullmatch(r"\[\d+\.\d+\.\d+\]( - \d{4}-\d{2}-\d{2})?", s) for s in sections[1:])
    assert not re.search(r"\bissues? \d+|\bitem \d+", text, re.IGNORECASE), re.search(
        r".{40}\b(issues? \d+|item \d+).{20}", text, re.IGNORECASE
    )
