"""The asyncdeploy CLI run in process, for every test that runs it that way (one helper).

Every run is held to the CLI's rule that bad input gets a clear error, never a traceback: an
exception other than the ``SystemExit`` that carries the exit code fails the test.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import anyio
from click.testing import CliRunner, Result

from asyncdeploy.cli import main


def invoke(*args: str, env: Mapping[str, str | None] | None = None) -> Result:
    """Run ``asyncdeploy ARGS`` in this thread (not on a running event loop: the CLI runs its
    own); ``env`` is set for the run (None values unset)."""
    result = CliRunner(env=env).invoke(main, list(args))
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


async def invoke_in_thread(*args: str, env: Mapping[str, str | None] | None = None) -> Result:
    """:func:`invoke` from a test on the event loop: in a worker thread."""
    return await anyio.to_thread.run_sync(functools.partial(invoke, *args, env=env))
