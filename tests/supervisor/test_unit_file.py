"""The shipped systemd unit: the settings the supervisor relies on, and systemd's own verdict."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.tree import STOP_BUDGET

UNIT = Path(__file__).resolve().parents[2] / "docs" / "systemd" / "clankie.service"


def directives() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def test_unit_declares_notify_mixed_kill_and_private_directories() -> None:
    """Type=notify with NotifyAccess=main, KillMode=mixed, 0700 runtime dir, credentials for both secrets."""
    d = directives()
    assert d["Type"] == ["notify"] and d["NotifyAccess"] == ["main"] and d["KillMode"] == ["mixed"]
    assert d["Restart"] == ["on-failure"] and d["RestartSec"] and d["WatchdogSec"]
    assert d["RuntimeDirectory"] == ["clankie"] and d["RuntimeDirectoryMode"] == ["0700"]
    assert d["StateDirectory"] == ["clankie"]
    creds = {v.split(":")[0] for v in d["LoadCredential"]}
    assert creds == {"discord_token", "anthropic_api_key"}
    assert float(d["TimeoutStopSec"][0]) > STOP_BUDGET  # systemd never cuts our ordered stop short


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    """`systemd-analyze verify` has no complaint about the unit (pointed at this checkout's clankie)."""
    clankie = Path(sys.executable).parent / "clankie"
    unit = tmp_path / "clankie.service"
    unit.write_text(UNIT.read_text().replace("/opt/clankie/venv/bin/clankie", str(clankie)))
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "clankie.service" not in proc.stderr, proc.stderr
