"""scripts/bootstrap asks apt for what a fresh machine lacks."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKE_APT_GET = """#!/bin/sh
[ "$1" = install ] || exit 0
echo "$@" > "$APT_LOG"
exit 1
"""


def test_bootstrap_installs_systemd_when_systemd_analyze_is_missing(tmp_path: Path) -> None:
    """On a machine without systemd-analyze, bootstrap installs systemd so the unit-file check runs instead of being skipped."""
    script = tmp_path / "repo/scripts/bootstrap"  # a copy, so nothing can reach the real .venv
    script.parent.mkdir(parents=True)
    shutil.copy2(ROOT / "scripts/bootstrap", script)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in os.listdir("/usr/bin"):
        if name not in {"systemd-analyze", "apt-get", "sudo"} and not name.startswith("python"):
            (bin_dir / name).symlink_to(Path("/usr/bin") / name)
    for name, body in {"apt-get": FAKE_APT_GET, "sudo": '#!/bin/sh\nexec "$@"\n'}.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "apt.log"
    env = {"PATH": str(bin_dir), "APT_LOG": str(log), "HOME": str(tmp_path)}
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0, "without python3 apt is always asked, and the fake apt-get install fails"
    assert "systemd" in log.read_text().split(), proc.stderr
