"""Issue 37 item 1: a budget raise with no limit says --unlimited; 0 is no longer a silent "none"."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor import ctl


@pytest.mark.parametrize(
    ("argv", "argument"),
    [
        (["budget", "raise", "tree", "--tokens", "0"], "--tokens"),
        (["budget", "raise", "tree", "--usd", "0"], "--usd"),
        (["budget", "raise", "tree"], "--unlimited"),
        (["budget", "raise", "tree", "--unlimited", "--tokens", "5"], "--unlimited"),
        (["budget", "reset", "tree", "--unlimited"], "--unlimited"),
    ],
)
def test_a_raise_without_a_limit_or_with_zero_is_a_usage_error(
    argv: list[str], argument: str, runtime_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 and the argument named, before any supervisor is dialled (there is none here)."""
    code = ctl.main(["--socket", str(runtime_dir / "control.sock"), *argv])
    assert code == 2
    assert f"bad argument: {argument}:" in capsys.readouterr().err
