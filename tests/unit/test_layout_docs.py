"""The Layout sections of the README and docs/development.md say what the package is: every
module they name exists, every module is named, and the floors they draw are the import
contracts of ``pyproject.toml`` (the values, the layers, the server kit's imports)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tests.unit.test_import_cycles import imports_of, module_files

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "asyncdeploy"
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def section(path: Path, heading: str) -> str:
    text = path.read_text()
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def contract(name_starts: str) -> dict[str, object]:
    return next(c for c in CONTRACTS["contracts"] if c["name"].startswith(name_starts))


def short(module: str) -> str:
    return module.removeprefix("asyncdeploy.")


def named(text: str) -> set[str]:
    """Every `code` span's module-looking names: ``plan/``, ``events``, ``_drain.py``."""
    spans = re.findall(r"`([^`]+)`", text)
    return {
        part.strip().rstrip("/").removesuffix(".py") for span in spans for part in span.split(",")
    }


README = section(ROOT / "README.md", "Layout")
DEVELOPMENT = section(ROOT / "docs" / "development.md", "Layout")


def test_the_values_they_name_are_the_values_contract() -> None:
    values = {short(m) for m in contract("the values")["source_modules"]}  # type: ignore[union-attr]
    readme_values = README[
        README.index("- values:") : README.index("- what the drivers are handed")
    ]
    assert values <= named(readme_values), values - named(readme_values)
    development_values = DEVELOPMENT[: DEVELOPMENT.index("import no driver")]
    assert values <= named(development_values), values - named(development_values)


def test_the_readme_draws_the_layers_in_the_contracts_order() -> None:
    """Each layer named in the README's Layout (as `name`, `name/` or `name.py`), bottom up in
    the contract's order; siblings (``a | b``) both named, at the same floor."""
    layout = README  # (the Layout section)

    def at(module: str) -> int:
        for form in (f"`{module}/`", f"`{module}`", f"`{module}.py`"):
            if form in layout:
                return layout.index(form)
        raise AssertionError(f"the README's Layout does not name {module}")

    layers = [
        [short(m.strip()) for m in layer.split("|")]
        for layer in contract("the CLI on top")["layers"]  # type: ignore[union-attr]
    ]
    said = [floor for floor in reversed(layers) if floor != ["_opening"]]  # bottom up
    where = [min(at(m) for m in floor) for floor in said]
    assert where == sorted(where), dict(zip(map(" | ".join, said), where, strict=True))


def test_what_they_say_the_server_kit_imports_is_what_it_imports() -> None:
    files = module_files(PACKAGE)
    kit = {m for m in files if m == "asyncdeploy.workload" or m.startswith("asyncdeploy.workload.")}
    outside = {
        short(i)
        for m in kit
        for i in imports_of(m, files[m], files)
        if i not in kit and i != "asyncdeploy"
    }
    for text in (README, DEVELOPMENT):
        sentence = text[text.index("`workload/` (the server kit) imports only") :].split("\n\n")[0]
        assert outside <= named(sentence), outside - named(sentence)


def test_every_module_is_in_the_development_layout_and_every_one_named_exists() -> None:
    top = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()}
    top -= {"__init__", "__main__", "__pycache__", "py"}
    top = {t for t in top if not t.startswith(".")}
    assert top <= named(DEVELOPMENT), sorted(top - named(DEVELOPMENT))
    for package in ("drivers/engine", "drivers/kubernetes"):
        row = next(line for line in DEVELOPMENT.splitlines() if line.startswith(f"| `{package}/`"))
        modules = {p.stem for p in (PACKAGE / package).glob("_*.py") if p.stem != "__init__"}
        subpackages = {p.parent for p in (PACKAGE / package).glob("_*/__init__.py")}
        modules |= {p.name for p in subpackages}
        said = {n for n in named(row) if n.startswith("_")}
        assert said == modules, {"not there": said - modules, "not named": modules - said}
        for subpackage in subpackages:  # and each module of a subpackage, by its own name
            inner = {p.stem for p in subpackage.glob("*.py") if p.stem != "__init__"}
            assert inner <= named(row), sorted(inner - named(row))
