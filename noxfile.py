"""Sessions: tests, lint, typecheck (default), demo, examples and bench (on demand)."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True

PYPROJECT = nox.project.load_toml("pyproject.toml")


def install(session: nox.Session, *groups: str) -> None:
    session.install("-e", ".")
    for group in groups:
        session.install(*nox.project.dependency_groups(PYPROJECT, group))


@nox.session
def tests(session: nox.Session) -> None:
    """Every test: unit, workload kit, Kubernetes fake API server, real Docker and Podman.

    Set ASYNCDEPLOY_REQUIRE_ENGINES=docker,podman to fail (not skip) when an engine is missing.
    """
    install(session, "test")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff: lint rules (with the ASYNC set) and formatting."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package."""
    install(session, "typing")
    session.run("mypy", "asyncdeploy")


@nox.session(default=False)
def demo(session: nox.Session) -> None:
    """The main job: deploy the demo inference server, drain it under traffic, show the result."""
    install(session, "test")
    session.run("python", "examples/demo.py", *session.posargs)
