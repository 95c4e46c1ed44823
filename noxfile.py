"""Sessions: tests, lint, typecheck (default), demo, examples and bench (on demand)."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True
# uv where it is installed (ci/setup.sh puts it beside nox): it makes the tests' venv in seconds
# where pip took minutes of CI's time; virtualenv and pip otherwise
nox.options.default_venv_backend = "uv|virtualenv"

PYPROJECT = nox.project.load_toml("pyproject.toml")
PEER_REQUIREMENT = "gpustack-runtime==0.2.6"  # the version the README's figures were measured with


def install(session: nox.Session, *groups: str) -> None:
    """The package with every driver extra (docker, kubernetes) and the dependency groups, in
    one resolution; and pip, which a venv made by uv lacks: `images build` downloads the
    images' wheels with the running Python's pip, as a user's pip-made venv has it."""
    needs = [need for group in groups for need in nox.project.dependency_groups(PYPROJECT, group)]
    session.install("-e", ".[all]", "pip", *needs)


# Streams of the suite side by side, for time: most of their time is spent waiting on drains,
# grace periods and real balancers' checks. Each engine's tests on three pytest-xdist workers
# (one file to a worker at a time: a file's module fixtures stay whole; each worker names its
# workloads by its own run id); the real cluster's tests in one stream, the engine-free suite
# in another, a file at a time (measured on the 2-core CI machine: two workers per engine took
# 17.4 and 18.7 min, three 14.7 and 15.6). They partition the suite and share no workload.
# The `alone` tests (tests/conftest.py says which, and why) after them: the ones that rebuild
# Docker's images once Docker's stream has ended, the forty-at-once drains (their load on the
# engines' APIs is their subject) once both engine streams and those have ended; each beside
# what is left of the cluster's and the engine-free streams, which use neither engine. (No test
# is alone for time: none holds the product to a wall-clock bound.)
ENGINE_WORKERS = ("-n", "3", "--dist", "loadfile")
DOCKER, PODMAN, CLUSTER, ENGINE_FREE, REBUILDERS, DRAINS_AT_ONCE = range(6)
RUNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("docker and not alone", ENGINE_WORKERS),
    ("podman and not docker and not alone", ENGINE_WORKERS),
    ("cluster and not alone", ()),
    ("not (docker or podman or cluster) and not alone", ()),
    ("alone and rebuilds_images", ()),
    ("alone and not rebuilds_images", ()),
)


@nox.session
def tests(session: nox.Session) -> None:
    """Every test: unit, workload kit, Kubernetes fake API server, real Docker and Podman, and
    a real Kubernetes cluster when ASYNCDEPLOY_TEST_KUBECONFIG names one (ci/setup.sh starts it).

    Set ASYNCDEPLOY_REQUIRE_ENGINES=docker,podman to fail (not skip) when an engine is missing,
    ASYNCDEPLOY_REQUIRE_KUBERNETES=1 to fail when the cluster is. With no arguments the suite
    runs as streams side by side, then the alone tests (RUNS says which, and when); with pytest
    arguments, as one run.
    """
    import contextlib
    import os
    import subprocess
    import sys
    import tempfile

    install(session, "test")
    # the slowest tests named at the end: where CI time goes, read off every run
    if session.posargs:
        session.run("pytest", "--durations=30", *session.posargs)
        return
    env = dict(os.environ)
    for key, value in session.env.items():  # nox's None means "unset"
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    env["PATH"] = f"{session.bin}{os.pathsep}{os.environ['PATH']}"
    pytest = [f"{session.bin}/pytest", "--durations=15", "-p", "no:cacheprovider"]
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in RUNS]
        started: dict[int, subprocess.Popen[bytes]] = {}
        codes: dict[int, int] = {}

        def start(*indexes: int) -> None:
            for index in indexes:
                marks, workers = RUNS[index]
                command = [*pytest, *workers, "-m", marks]
                output = logs[index]
                started[index] = subprocess.Popen(
                    command, stdout=output, stderr=subprocess.STDOUT, env=env
                )

        def finish(*indexes: int) -> None:
            for index in indexes:
                codes[index] = started[index].wait()  # a Ctrl-C reaches all: one process group
                logs[index].seek(0)
                sys.stdout.write(f"\n===== -m {RUNS[index][0]!r} =====\n{logs[index].read()}")
                sys.stdout.flush()

        try:
            start(DOCKER, PODMAN, CLUSTER, ENGINE_FREE)
            finish(DOCKER)
            start(REBUILDERS)
            finish(PODMAN, REBUILDERS)
            start(DRAINS_AT_ONCE)
            finish(CLUSTER, ENGINE_FREE, DRAINS_AT_ONCE)
        finally:
            for process in started.values():
                if process.poll() is None:
                    process.terminate()
                    process.wait()
    if any(codes.values()):
        said = ", ".join(f"{codes[i]} (-m {RUNS[i][0]!r})" for i in sorted(codes))
        session.error(f"pytest exited {said}")


# The engine-free tests mostly wait (a real HAProxy's health checks, the kit's windows, a
# subprocess's start): run side by side, one file per worker at a time (its module fixtures
# stay whole), they take the time of the longest files, not of all of them in a row. Six
# workers on a 2-core machine, because they wait more than they compute: the engine-free suite
# (`-m "not engine and not cluster"`) took 121-128 s with four, 104 s with six, 100 s with eight
# (each worker collects the suite first: 4.5 s of CPU).
UNIT_WORKERS = ("-n", "6", "--dist", "loadfile")


@nox.session(default=False)
def unit(session: nox.Session) -> None:
    """What needs no engine, no cluster and no long wait: the quick loop while working
    (`-- -m "not engine and not cluster"` adds the slow ones: every engine-free test)."""
    install(session, "test")
    session.run(
        "pytest",
        *UNIT_WORKERS,
        "--durations=15",
        "-m",
        "not engine and not cluster and not slow",
        *session.posargs,
    )


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff: lint rules (with the ASYNC set) and formatting."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.install("-e", ".")  # lint-imports reads the package's import graph
    session.run("lint-imports")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package."""
    install(session, "typing")
    session.run("mypy", "asyncdeploy")


@nox.session(default=False)
def examples(session: nox.Session) -> None:
    """Run the examples/ scripts against the engine that answers (tests/engines covers them too)."""
    install(session)
    session.run("python", "examples/events.py", *session.posargs)
    session.run("python", "examples/embedded.py", *session.posargs)


@nox.session(default=False)
def demo(session: nox.Session) -> None:
    """The main job: deploy the demo inference server, drain it under traffic, show the result."""
    install(session, "test")
    session.run("python", "examples/demo.py", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Benchmark the drain on Docker and Podman: raw Engine API, the peer, asyncdeploy; then
    the CLI's start (`list` beside `docker ps` / `podman ps`, bench-results/bench-start.json);
    create -> ready -> delete with and without the settle wait (bench-results/bench-ready.json);
    how soon a gated drain signals its engine (bench-results/bench-hook.json);
    forty operations at once through one deployer beside the engine CLI in parallel
    (bench-results/bench-many-<engine>.json; $ASYNCDEPLOY_BENCH_COMPARE=DIR runs another
    checkout's code in the same rounds); then image pulls from the local registry, asyncdeploy
    beside `docker pull` / `podman pull`; then the drain gate's cost beside HAProxy and nginx in
    front of the same server (bench-results/bench-gate.json), and for gRPC beside HAProxy alone
    (bench-results/bench-gate-grpc.json).

    Prints a table per engine and writes bench-results/bench-<engine>.json (about 20 minutes;
    `nox -s bench -- --quick` is a smoke run, `-- --engines docker --runs 5` and `--no-peer`
    also work). The peer, gpustack-runtime from PyPI, goes into a bench-only venv
    ($ASYNCDEPLOY_BENCH_PEER_VENV, default /var/cache/asyncdeploy-bench/peer-venv), never into
    asyncdeploy's; when it cannot be installed the bench runs without it and says why.
    """
    import os
    import shutil
    import subprocess

    install(session)
    venv = os.environ.get("ASYNCDEPLOY_BENCH_PEER_VENV", "/var/cache/asyncdeploy-bench/peer-venv")
    peer_python = f"{venv}/bin/python"
    args = ["--peer-python", peer_python]

    def peer_imports() -> bool:
        if not os.path.exists(peer_python):
            return False
        probe = [peer_python, "-c", "import gpustack_runtime"]
        return subprocess.run(probe, capture_output=True, check=False).returncode == 0

    if "--no-peer" not in session.posargs:
        try:
            if not peer_imports():
                python3 = shutil.which("python3") or "python3"
                session.run(python3, "-m", "venv", "--clear", venv, external=True)
                session.run(
                    peer_python, "-m", "pip", "install", "-q", PEER_REQUIREMENT, external=True
                )
        except nox.command.CommandFailed as exc:
            args += ["--peer-unavailable", f"pip install gpustack-runtime failed ({exc.reason})"]
    session.run("python", "benchmarks/bench.py", *args, *session.posargs)
    # the CLI's start: `asyncdeploy --driver docker list` beside `docker ps` (and Podman's pair)
    session.run(
        "python", "benchmarks/start.py", *(["--quick"] if "--quick" in session.posargs else [])
    )
    # create -> ready -> delete: the settle wait's cost (default, 0, a readiness check)
    session.run(
        "python", "benchmarks/ready.py", *(["--quick"] if "--quick" in session.posargs else [])
    )
    # how soon a gated drain signals its engine, by the way its gate's drain call is sent
    session.run(
        "python", "benchmarks/hook.py", *(["--quick"] if "--quick" in session.posargs else [])
    )
    # many at once through one deployer beside the engine CLI in parallel (issue 25):
    # $ASYNCDEPLOY_BENCH_COMPARE names another checkout to run in the same rounds (before/after)
    compare = os.environ.get("ASYNCDEPLOY_BENCH_COMPARE")
    session.run(
        "python",
        "benchmarks/many.py",
        *(["--quick"] if "--quick" in session.posargs else []),
        *(["--compare-source", compare] if compare else []),
    )
    # the pull benchmark (local registry of ci/start-registry.sh): asyncdeploy beside docker/podman pull
    session.run(
        "python", "benchmarks/pull.py", *(["--smoke"] if "--quick" in session.posargs else [])
    )
    # the drain gate's cost beside HAProxy and nginx (needs wrk, haproxy, nginx; no engine):
    # the gate's own framing and loop (its extra), and the ASGI stack it was first measured beside
    session.install("-e", ".[gate]", "uvicorn", "httpx", "grpcio")
    session.run(
        "python", "benchmarks/gate.py", *(["--smoke"] if "--quick" in session.posargs else [])
    )
    # the same for gRPC (h2c both ways): the gate beside HAProxy alone
    session.run(
        "python", "benchmarks/gate_grpc.py", *(["--smoke"] if "--quick" in session.posargs else [])
    )


@nox.session(default=False)
def bench_kube(session: nox.Session) -> None:
    """Benchmark a Kubernetes delete: `asyncdeploy delete` against `kubectl delete --wait` of the
    same Pod (draining 2 s) on the cluster ci/start-kube.sh starts, plus the latency from the
    kubelet's Killing Event to SignalSent. Needs its environment (ASYNCDEPLOY_TEST_KUBECONFIG,
    ASYNCDEPLOY_KUBECTL, ...): `set -a; eval "$(bash ci/start-kube.sh)"; set +a` first.
    `nox -s bench_kube -- --smoke` is one run; `-- --runs 9` more; writes
    bench-results/bench-kube.json."""
    install(session)
    session.run("python", "benchmarks/kube.py", *session.posargs)
