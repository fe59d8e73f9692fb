"""Warm spares on a real supervisor with fixture children: a spare becomes the child and is replaced.

Real processes and real signals; every wait polls real state (status on the
control socket, the fixture's event file, /proc) with a deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
from pathlib import Path

import psutil
import pytest

from tests.supervisor.harness import events, fixture, pid_alive, supervisor, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _spare_pid(sup: object, name: str) -> int | None:
    child = sup.child(name)  # type: ignore[attr-defined]  # the harness's Running exposes child() dynamically
    return child.spare_pid if child.spare.startswith("parked") else None


def test_a_spare_becomes_the_child_and_a_new_one_is_parked(tmp_path: Path, runtime_dir: Path) -> None:
    """SIGKILL of the child: its parked spare is the new child (pid, group, heartbeats, stall watchdog) and is replaced."""
    ev = tmp_path / "ev"
    kid = fixture("w", "--run-age", "1000", events=ev, spare=True, watch_stalls=True, policy={"intensity": 100})
    env = {"CLANKIE_STALL_SECONDS": "300"}
    with supervisor(tmp_path, runtime_dir, [kid], env=env) as sup:
        spare = wait_for(lambda: _spare_pid(sup, "w"), 20, "a parked spare")
        first = sup.child("w").pid
        assert spare != first
        assert ("PARKED", spare) in [(k, p) for k, _t, p in events(ev)]
        assert ("READY", spare) not in [(k, p) for k, _t, p in events(ev)]  # parked: not serving
        proc = psutil.Process(spare)
        assert proc.ppid() == sup.proc.pid and os.getpgid(spare) == spare  # our child, its own group

        os.kill(first, signal.SIGKILL)
        now = wait_for(lambda: (c := sup.child("w")).state == "running" and c.pid != first and c, 20, "w back")
        assert now.pid == spare  # the spare took over: no new process was spawned for the child
        assert now.last_exit is not None and now.last_exit.signal == "SIGKILL"
        assert ("READY", spare) in [(k, p) for k, _t, p in events(ev)]
        # it is a proper child: heartbeats reach the supervisor and the stall watchdog aborts its stale run
        wait_for(lambda: ("ABORT-stalled", spare) in [(k, p) for k, _t, p in events(ev)], 20, "stall abort")
        assert sup.child("w").last_heartbeat_age_s is not None

        replacement = wait_for(lambda: _spare_pid(sup, "w"), 20, "the next spare")
        assert replacement not in (first, spare)
        starts = [p for k, _t, p in events(ev) if k == "START"]
        assert starts == [first, spare, replacement]  # the child itself was never spawned cold again

        sup.proc.kill()  # PDEATHSIG: the promoted spare and the new spare die with the supervisor
        sup.proc.wait()
        wait_for(lambda: not pid_alive(spare) and not pid_alive(replacement), 5, "no survivors")


def test_a_spare_delay_puts_the_spare_off_and_a_kill_meanwhile_is_a_cold_start(tmp_path: Path, runtime_dir: Path) -> None:
    """``CLANKIE_SPARE_DELAY_SECONDS``: no spare is spawned before the delay; a child killed meanwhile starts cold."""
    ev = tmp_path / "ev"
    kid = fixture("w", events=ev, spare=True, policy={"intensity": 100})
    with supervisor(tmp_path, runtime_dir, [kid], env={"CLANKIE_SPARE_DELAY_SECONDS": "3600"}) as sup:
        first = wait_for(lambda: (c := sup.child("w")).state == "running" and c.pid, 20, "w running")
        assert sup.child("w").spare == "none yet" and sup.child("w").spare_pid is None
        os.kill(first, signal.SIGKILL)
        now = wait_for(lambda: (c := sup.child("w")).state == "running" and c.pid != first and c, 20, "w back")
        assert [p for k, _t, p in events(ev) if k == "START"] == [first, now.pid]  # spawned cold: no spare between
        assert [k for k, _t, _p in events(ev) if k == "PARKED"] == []
        assert sup.child("w").spare == "none yet"


def test_a_spare_that_dies_is_replaced_and_the_child_starts_cold_without_one(tmp_path: Path, runtime_dir: Path) -> None:
    """A killed spare is replaced after its backoff; with the hand-over off there is no spare and restarts are cold."""
    ev = tmp_path / "ev"
    with supervisor(tmp_path, runtime_dir, [fixture("w", events=ev, spare=True)]) as sup:
        spare = wait_for(lambda: _spare_pid(sup, "w"), 20, "a parked spare")
        os.kill(spare, signal.SIGKILL)
        again = wait_for(lambda: (p := _spare_pid(sup, "w")) and p != spare and p, 20, "a new spare")
        assert again != spare and sup.child("w").state == "running"

    ev2 = tmp_path / "ev2"
    off = tmp_path / "off"
    off.mkdir()
    with supervisor(off, runtime_dir, [fixture("w", events=ev2, spare=True)], env={"CLANKIE_HANDOVER": "false"}) as sup:
        assert sup.child("w").spare == "off"
        first = sup.child("w").pid
        os.kill(first, signal.SIGKILL)
        back = wait_for(lambda: (c := sup.child("w")).state == "running" and c.pid != first and c, 20, "w back")
        assert [p for k, _t, p in events(ev2) if k == "START"] == [first, back.pid]  # spawned cold
        assert "PARKED" not in [k for k, _t, _p in events(ev2)]


def test_an_invalid_handover_setting_stops_the_supervisor_with_one_line(tmp_path: Path, runtime_dir: Path) -> None:
    """CLANKIE_HANDOVER=maybe is a configuration error: one line naming it, exit status 78."""
    import subprocess
    import sys

    from tests.supervisor.harness import REPO

    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "CLANKIE_STATE": str(tmp_path / "state"),
        "CLANKIE_RUNTIME_DIR": str(runtime_dir),
        "PYTHONPATH": str(REPO),
        "CLANKIE_HANDOVER": "maybe",
    }
    done = subprocess.run([sys.executable, "-m", "supervisor", "run"], env=env, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 78
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "CLANKIE_HANDOVER" in lines[0], done.stderr


def _socket_inode(pid: int, fd: int) -> int:
    target = os.readlink(f"/proc/{pid}/fd/{fd}")
    assert target.startswith("socket:["), target
    return int(target[8:-1])


def _all_socket_inodes(pid: int) -> set[int]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                out.add(int(target[8:-1]))
    return out


def test_a_child_inherits_exactly_its_own_listener_and_the_file_stays_the_supervisors(tmp_path: Path, runtime_dir: Path) -> None:
    """A child with a socket in its spec starts with stdio, its link and that listener only; a sibling holds none of it."""
    import subprocess
    import sys

    listing = "import os; print(' '.join(map(str, sorted(int(f) for f in os.listdir('/proc/self/fd')))))"
    baseline = {int(f) for f in subprocess.run([sys.executable, "-c", listing], capture_output=True, text=True, check=True).stdout.split()}
    kids = [
        fixture("a", "--fds", str(tmp_path / "fds-a"), sockets=["tldraw"], spare=True),
        fixture("b", "--fds", str(tmp_path / "fds-b")),
    ]
    with supervisor(tmp_path, runtime_dir, kids) as sup:
        path = runtime_dir / "tldraw.sock"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        a, b = sup.child("a").pid, sup.child("b").pid
        env = psutil.Process(a).environ()
        link_fd = int(env["CLANKIE_SUPERVISOR_FD"])
        name, _, listen_fd = env["CLANKIE_LISTEN_FDS"].partition(":")
        assert name == "tldraw"
        started_with = {int(f) for f in (tmp_path / "fds-a").read_text().split()}
        assert started_with == baseline | {link_fd, int(listen_fd)}
        listener = _socket_inode(a, int(listen_fd))
        assert listener in _all_socket_inodes(sup.proc.pid)  # the supervisor holds the same socket
        assert listener not in _all_socket_inodes(b)
        assert "CLANKIE_LISTEN_FDS" not in psutil.Process(b).environ()
        spare = wait_for(lambda: _spare_pid(sup, "a"), 20, "a's spare")
        assert listener in _all_socket_inodes(spare)  # its spare has it too, ready to serve it
        os.kill(a, signal.SIGKILL)
        wait_for(lambda: sup.child("a").pid == spare and sup.child("a").state == "running", 20, "the spare took over")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and listener in _all_socket_inodes(sup.proc.pid)
