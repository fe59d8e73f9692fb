"""Issue 14 items 1 and 4, through real processes: every bad setting or directory is one line and exit 78.

`clankie run` (and `python -m bridge` by hand) must refuse a directory it did
not create if it is open to group/other, owned by someone else, not a
directory or not writable, and must leave it exactly as it was; a
non-finite number or a malformed URL is refused the same way. Nothing here
is restarted in a loop by systemd (RestartPreventExitStatus=78).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from clankie.errors import EX_CONFIG

REPO = Path(__file__).resolve().parents[2]


def base_env(tmp: Path, runtime: Path) -> dict[str, str]:
    state = tmp / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(state),
        "CLANKIE_STATE": str(state),
        "CLANKIE_RUNTIME_DIR": str(runtime),
        "PYTHONPATH": str(REPO),
    }


def run(argv: list[str], env: dict[str, str], prefix: list[str] | None = None) -> tuple[int, list[str]]:
    """Run a real process to its end; return its status and its non-empty stderr lines."""
    proc = subprocess.run(
        [*(prefix or []), *argv], env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60, cwd=REPO
    )
    return proc.returncode, [line for line in proc.stderr.decode(errors="replace").splitlines() if line.strip()]


CLANKIE_RUN = [sys.executable, "-m", "supervisor", "run"]


def snapshot(path: Path) -> tuple[int, int, int, list[str]]:
    st = path.stat()
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, sorted(os.listdir(path))


@pytest.mark.parametrize("variable", ["CLANKIE_RUNTIME_DIR", "CLANKIE_STATE", "CLANKIE_DISCORD_ATTACHMENT_ROOT"])
def test_a_0755_directory_it_did_not_create_is_refused_and_left_as_it_was(
    tmp_path: Path, runtime_dir: Path, variable: str
) -> None:
    """`CLANKIE_RUNTIME_DIR=/etc clankie run` made /etc 0700; now a 0755 dir is named in one line and untouched."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    theirs.chmod(0o755)
    (theirs / "their-file").write_text("not ours")
    before = snapshot(theirs)
    env = base_env(tmp_path, runtime_dir)
    env[variable] = str(theirs)
    code, lines = run(CLANKIE_RUN, env)
    assert code == EX_CONFIG, lines
    assert len(lines) == 1 and str(theirs) in lines[0] and "group/other" in lines[0], lines
    assert snapshot(theirs) == before
    assert (theirs / "their-file").read_text() == "not ours"


def test_a_runtime_dir_owned_by_another_uid_is_refused(tmp_path: Path, runtime_dir: Path) -> None:
    """Wrong owner: refused with the uids named, the owner and mode kept."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a directory owned by another uid")
    theirs = tmp_path / "nobodys"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    before = snapshot(theirs)
    env = base_env(tmp_path, runtime_dir)
    env["CLANKIE_RUNTIME_DIR"] = str(theirs)
    code, lines = run(CLANKIE_RUN, env)
    assert code == EX_CONFIG and len(lines) == 1 and "belongs to uid 65534" in lines[0], lines
    assert snapshot(theirs) == before


def test_a_state_dir_that_is_a_file_is_one_line_and_78_not_a_traceback(tmp_path: Path, runtime_dir: Path) -> None:
    """This used to exit 1 with a traceback from supervisor/app.py, which systemd restarts forever."""
    env = base_env(tmp_path, runtime_dir)
    state = tmp_path / "state-file"
    state.write_text("I am a file")
    env["CLANKIE_STATE"] = str(state)
    code, lines = run(CLANKIE_RUN, env)
    assert code == EX_CONFIG and len(lines) == 1 and "not a directory" in lines[0], lines
    assert state.read_text() == "I am a file"


def test_an_unwritable_state_dir_is_one_line_and_78(tmp_path: Path, runtime_dir: Path) -> None:
    """A read-only state dir (a read-only bind mount in a private mount namespace as root; mode 0500 otherwise)."""
    env = base_env(tmp_path, runtime_dir)
    state = tmp_path / "ro-state"
    state.mkdir(mode=0o700)
    env["CLANKIE_STATE"] = str(state)
    if os.geteuid() == 0:
        if shutil.which("unshare") is None:
            pytest.skip("unshare is not installed: cannot make a read-only mount for root")
        script = f'mount --bind "{state}" "{state}" && mount -o remount,bind,ro "{state}" && exec "$@"'
        prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
    else:
        state.chmod(0o500)
        prefix = []
    code, lines = run(CLANKIE_RUN, env, prefix)
    assert code == EX_CONFIG and len(lines) == 1 and "not writable" in lines[0] and str(state) in lines[0], lines
    assert os.listdir(state) == []


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("CLANKIE_STALL_SECONDS", "inf"),
        ("CLANKIE_STALL_TICK_SECONDS", "nan"),
        ("CLANKIE_HEARTBEAT_SECONDS", "nan"),
        ("CLANKIE_HEARTBEAT_TIMEOUT_SECONDS", "inf"),
        ("CLANKIE_DISCORD_API_BASE", "discord.example/api/v10"),
        ("CLANKIE_METRICS_MAX_CONNECTIONS", "0"),
        ("CLANKIE_METRICS_HEADER_SECONDS", "nan"),
    ],
)
def test_a_setting_that_could_never_work_stops_clankie_run_with_one_line(
    tmp_path: Path, runtime_dir: Path, variable: str, value: str
) -> None:
    """inf/nan used to be accepted (the watchdog could never fire); now the supervisor refuses before any child starts."""
    env = base_env(tmp_path, runtime_dir)
    env[variable] = value
    code, lines = run(CLANKIE_RUN, env)
    assert code == EX_CONFIG and len(lines) == 1 and variable in lines[0], lines
    assert not (runtime_dir / "control.sock").exists()


@pytest.mark.parametrize("value", ["127.0.0.1:9/api/v10", "http://127.0.0.1:9", "http://127.0.0.1:0/api/v10"])
def test_a_malformed_discord_api_base_stops_the_bridge_with_78(tmp_path: Path, runtime_dir: Path, value: str) -> None:
    """`python -m bridge` with a bad CLANKIE_DISCORD_API_BASE used to crash-loop; now one line and 78."""
    env = base_env(tmp_path, runtime_dir)
    env.update({"CLANKIE_DISCORD_API_BASE": value, "DISCORD_TOKEN": "t0ken"})
    code, lines = run([sys.executable, "-m", "bridge"], env)
    assert code == EX_CONFIG and len(lines) == 1 and "CLANKIE_DISCORD_API_BASE" in lines[0], lines
    assert "t0ken" not in lines[0]
