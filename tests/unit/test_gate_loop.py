"""The gate's ``--loop``: uvloop when installed (optional for the library), asyncio's always."""

from __future__ import annotations

import sys

import pytest

from asyncdeploy.gate.__main__ import loop_options, main


def test_auto_takes_uvloop_when_it_is_installed() -> None:
    pytest.importorskip("uvloop", reason="uvloop is in the test dependency group")
    assert loop_options("auto") == {"use_uvloop": True}
    assert loop_options("uvloop") == {"use_uvloop": True}
    assert loop_options("asyncio") == {"use_uvloop": False}


def test_without_uvloop_auto_falls_back_and_asking_for_it_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert loop_options("auto") == {"use_uvloop": False}
    with pytest.raises(SystemExit) as exit_:
        main(["--upstream", "8001", "--loop", "uvloop"])
    assert exit_.value.code == 2
    assert "uvloop is not installed" in capsys.readouterr().err
