"""Issue 38 item 2, against a real supervisor: a running child's row says how its last process ended and why it was
started again; a crash is a WARNING line of the supervisor's own log, which ``clankiectl logs supervisor`` reads
(outside systemd; under it, the journal is named instead); ``clankiectl --version``."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from clankie.protocol import ExitInfo
from clankie.version import describe, revision, version
from supervisor import ctl
from supervisor.ctl_render import exit_fields
from tests.supervisor.harness import fixture, supervisor, wait_for


def row(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"{name} "))


@pytest.mark.timeout(60)
def test_a_crash_shows_on_the_running_childs_row_and_in_the_supervisors_own_log(
    tmp_path: Path, runtime_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with supervisor(tmp_path, runtime_dir, [fixture("svc")]) as sup:
        sock = ["--socket", str(sup.sock)]
        pid = sup.child("svc").pid
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: (c := sup.child("svc")).state == "running" and c.pid != pid and c, 10, "svc back up")

        assert ctl.main([*sock, "status"]) == 0
        crashed = row(capsys.readouterr().out, "svc")
        assert re.search(r"\brunning\b.*\[last exit: code=killed, signal=KILL; crash, \d+s ago\]", crashed), crashed
        assert ctl.main([*sock, "status", "svc", "--json"]) == 0
        (child,) = json.loads(capsys.readouterr().out)["children"]
        assert child["restart_reason"] == "crash" and child["restarts_by"] == {
            "crash": 1, "watchdog": 0, "spawn_error": 0, "operator": 0}

        assert ctl.main([*sock, "restart", "svc"]) == 0
        capsys.readouterr()
        sup.wait_state("svc", "running")
        assert ctl.main([*sock, "status"]) == 0
        restarted = row(capsys.readouterr().out, "svc")
        assert re.search(r"\[last exit: code=exited, status=0; operator, \d+s ago\]", restarted), restarted

        assert ctl.main([*sock, "logs", "supervisor", "-n", "1000"]) == 0
        own = capsys.readouterr().out
        assert re.search(rf"^\S+ WARNING supervisor\.process: svc pid={pid} killed by SIGKILL \(crash\); now backoff$",
                         own, re.M), own
        assert re.search(r"^\S+ INFO supervisor\.process: svc pid=\d+ .*\(operator\); now", own, re.M), own
        assert f"INFO supervisor.app: {describe()}" in own  # the build, first thing it says
        assert "svc| " not in own  # the children's lines are in their own files
        assert (sup.state / "logs" / "supervisor.log").stat().st_mode & 0o077 == 0


@pytest.mark.timeout(60)
def test_under_systemd_logs_supervisor_names_the_journal(
    tmp_path: Path, runtime_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its stderr is the journal stream: no file of its own, and the refusal says where its lines are."""
    err = tmp_path / "supervisor.stderr"  # the harness writes the supervisor's stderr here (same inode)
    err.touch()
    st = err.stat()
    with supervisor(tmp_path, runtime_dir, [fixture("svc")], env={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}) as sup:
        assert ctl.main(["--socket", str(sup.sock), "logs", "supervisor"]) == 1
        assert "no_log_file: under systemd the supervisor logs to the journal: journalctl -u clankie" in \
            capsys.readouterr().err
        assert not (sup.state / "logs" / "supervisor.log").exists()


def test_version_prints_the_distribution_and_the_revision(capsys: pytest.CaptureFixture[str]) -> None:
    assert ctl.main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == describe() == f"clankie {version()} (revision {revision()})"
    assert version() != "unknown"  # installed by scripts/bootstrap


def test_an_exit_reads_as_systemctl_status_writes_it() -> None:
    assert exit_fields(ExitInfo(signal="SIGKILL", at=0)) == "code=killed, signal=KILL"
    assert exit_fields(ExitInfo(signal="SIGSEGV", core=True, at=0)) == "code=dumped, signal=SEGV"
    assert exit_fields(ExitInfo(code=1, at=0)) == "code=exited, status=1"
    assert exit_fields(ExitInfo(at=0)) == "code=spawn_error"
