"""scripts/bootstrap asks apt for what a fresh machine lacks, and makes its venv from the interpreter
scripts/venv-python names."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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
    shutil.copy2(ROOT / "scripts/venv-python", script.parent / "venv-python")
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
    assert proc.returncode != 0, "apt is asked for systemd, and the fake apt-get install fails"
    assert "systemd" in log.read_text().split(), proc.stderr


def venv_python(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ROOT / "scripts/venv-python")], env={"HOME": str(tmp_path), **env},
                          capture_output=True, text=True, timeout=30)


def debian_python() -> bool:
    """Whether this machine has what a fresh Debian (12 or later) has: /usr/bin/python3, 3.11 or newer."""
    probe = "import sys; sys.exit(sys.version_info < (3, 11))"
    return os.access("/usr/bin/python3", os.X_OK) and subprocess.run(["/usr/bin/python3", "-c", probe], timeout=30).returncode == 0


def test_the_venv_is_made_from_debians_python3_even_when_another_comes_first_on_path(tmp_path: Path) -> None:
    """A pyenv shim (here: this suite's own interpreter, by the name python3) first on PATH does not win over the
    distribution's interpreter, which is built with PGO and LTO (docs/testing.md, "The interpreter")."""
    assert debian_python(), "the suite runs on Debian 12 or later, whose python3 is 3.11"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    proc = venv_python(tmp_path, PATH=f"{bin_dir}:/usr/bin:/bin")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "/usr/bin/python3\n", "")


def test_clankie_python_names_the_interpreter_outright(tmp_path: Path) -> None:
    """An operator's own interpreter, named by CLANKIE_PYTHON, is used whatever else the machine has."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3.99").symlink_to(sys.executable)
    proc = venv_python(tmp_path, PATH=f"{bin_dir}:/usr/bin:/bin", CLANKIE_PYTHON="python3.99")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"{bin_dir}/python3.99\n", "")


def test_a_clankie_python_that_names_nothing_is_one_line_and_exit_78(tmp_path: Path) -> None:
    """A wrong CLANKIE_PYTHON stops the set-up before anything is installed, saying which name it was."""
    proc = venv_python(tmp_path, PATH="/usr/bin:/bin", CLANKIE_PYTHON="/nowhere/python3")
    assert (proc.returncode, proc.stdout) == (78, "")
    assert proc.stderr == "venv-python: CLANKIE_PYTHON=/nowhere/python3 is not a command\n"
