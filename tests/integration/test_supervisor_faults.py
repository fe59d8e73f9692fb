"""Child faults against a real supervisor process: real children, real signals (supervisor-notes §7 A)."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.processes import children_where
from tests.supervisor.harness import events, fixture, pid_alive, supervisor, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


def test_a1_crash_at_startup_backs_off_and_leaves_the_others_alone(tmp_path: Path, runtime_dir: Path) -> None:
    """A child that dies at once shows backoff, next_start_at and its last exit; its sibling is untouched."""
    ev = tmp_path / "ev"
    kids = [
        fixture("good"),
        fixture("bad", "--exit-now", "--exit-code", "3", events=ev, policy={"backoff_base": 0.2, "backoff_cap": 0.8}),
    ]
    with supervisor(tmp_path, runtime_dir, kids, wait_ready=False) as sup:
        wait_for(lambda: len(events(ev, "START")) >= 5, 15, "five starts")
        bad = sup.wait_state("bad", "backoff")
        assert bad.last_exit.code == 3 and bad.next_start_at is not None and bad.next_start_at > time.time() - 1
        assert "crashed: exited 3" in bad.reason
        # capped, as the supervisor scheduled it (its own two clocks, not how fast this machine starts a process)
        assert 0 <= bad.next_start_at - bad.last_exit.at <= 0.8 + 0.25
        good = sup.child("good")
        assert good.state == "running" and good.restarts == 0


def test_a3_kill_9_is_restarted_at_once_and_recorded(tmp_path: Path, runtime_dir: Path) -> None:
    """kill -9 of a running child: back up quickly, last_exit signal=SIGKILL, restarts+1."""
    ev = tmp_path / "ev"
    with supervisor(tmp_path, runtime_dir, [fixture("svc", events=ev)]) as sup:
        pid = sup.child("svc").pid
        t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        os.kill(pid, signal.SIGKILL)
        new = wait_for(lambda: [e for e in events(ev, "START") if e[2] != pid], 10, "restart")
        after = sup.wait_state("svc", "running")
        assert after.last_exit.signal == "SIGKILL" and after.restarts == 1 and after.pid != pid
        # what the supervisor scheduled (its own clock), not how fast this machine starts a process
        delays = [float(d) for d in re.findall(r"svc starts again in ([0-9.]+)s", sup.stderr())]
        assert len(delays) == 1 and 0 <= delays[0] <= 0.5  # the full-jitter first delay is at most 0.5 s
        assert new[0][1] > t0


def test_a4_a_sigstopped_child_is_killed_for_missing_heartbeats(tmp_path: Path, runtime_dir: Path) -> None:
    """A stopped child misses heartbeats, is TERM/CONT/KILLed and restarted with reason heartbeat."""
    kids = [fixture("svc", heartbeat_timeout=0.6, stop_timeout=0.3, policy={"backoff_base": 0.05})]
    with supervisor(tmp_path, runtime_dir, kids) as sup:
        # The stopped process is the one that is running now: on a loaded machine a cold start can itself miss the
        # 0.6 s timeout and be replaced, so the count is read here and the restart is any past it.
        before = sup.wait_state("svc", "running")
        pid = before.pid
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: (c := sup.child("svc")).pid not in (None, pid) and c.restarts > before.restarts, 30, "restart")
        assert not pid_alive(pid)
        assert "heartbeat" in sup.stderr()
        st = sup.child("svc")
        assert st.last_exit is not None


def test_a5_a_child_ignoring_sigterm_is_killed_after_grace(tmp_path: Path, runtime_dir: Path) -> None:
    """`stop` returns once the grace has run out, and status says the child was killed after grace."""
    with supervisor(tmp_path, runtime_dir, [fixture("stubborn", "--ignore-term", stop_timeout=0.5)]) as sup:
        from clankie.protocol import ChildTarget

        reply = sup.call("stop", ChildTarget(name="stubborn"))
        c = reply.children[0]
        assert c.state == "stopped" and c.ended == "killed after grace" and c.last_exit.signal == "SIGKILL"


def test_a6_exit_0_on_a_requested_stop_is_stopped_and_stays_down(tmp_path: Path, runtime_dir: Path) -> None:
    """A child that exits 0 when asked to stop reads `stopped`, with no backoff and no restart."""
    ev = tmp_path / "ev"
    with supervisor(tmp_path, runtime_dir, [fixture("svc", events=ev)]) as sup:
        from clankie.protocol import ChildTarget

        reply = sup.call("stop", ChildTarget(name="svc"))
        c = reply.children[0]
        assert c.state == "stopped" and c.last_exit.code == 0 and c.next_start_at is None
        time.sleep(0.3)  # sleep: a wrong restart must not happen in this window
        assert len(events(ev, "START")) == 1 and sup.child("svc").state == "stopped"


def test_a7_a9_grandchildren_die_with_their_parent_and_do_not_delay_the_restart(tmp_path: Path, runtime_dir: Path) -> None:
    """A child with 5 grandchildren (holding its stdout) is SIGKILLed: all 6 are gone, the restart is prompt."""
    ev = tmp_path / "ev"
    with supervisor(tmp_path, runtime_dir, [fixture("svc", "--grandchildren", "5", events=ev)]) as sup:
        grand = wait_for(lambda: g if len(g := events(ev, "GRANDCHILD")) == 5 else None, 10, "grandchildren")
        pid = sup.child("svc").pid
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: sup.child("svc").pid not in (None, pid), 5, "restart")
        wait_for(lambda: not any(pid_alive(p) for _, _, p in grand), 3, "grandchildren gone")


def test_a8_a_double_forking_child_leaves_no_zombies(tmp_path: Path, runtime_dir: Path) -> None:
    """Daemonized grandchildren are reaped by the subreaper: no Z entries under the supervisor."""
    ev = tmp_path / "ev"
    kids = [fixture("dbl", "--double-fork", "--exit-after", "0.05", events=ev, policy={"backoff_base": 0.01, "backoff_cap": 0.05, "intensity": 1000})]
    with supervisor(tmp_path, runtime_dir, kids, wait_ready=False) as sup:
        wait_for(lambda: len(events(ev, "DAEMON")) >= 10, 20, "10 double forks")
        sup_ps = psutil.Process(sup.proc.pid)

        def zombies() -> list[psutil.Process]:  # the child crash-loops every 0.05 s: one listed may be reaped before its look
            return children_where(sup_ps, lambda p: p.status() == psutil.STATUS_ZOMBIE)

        wait_for(lambda: not zombies(), 2, "no zombies")


def test_a11_exec_failure_is_a_spawn_error_with_backoff(tmp_path: Path, runtime_dir: Path) -> None:
    """A missing executable shows spawn_error ENOENT, backs off, and the control socket stays responsive."""
    kids = [
        fixture("ok"),
        {"name": "ghost", "argv": ["/nonexistent/bin"], "policy": {"backoff_base": 0.2}},
    ]
    with supervisor(tmp_path, runtime_dir, kids, wait_ready=False) as sup:
        ghost = wait_for(lambda: (c := sup.child("ghost")).restarts >= 2 and c, 10, "retries")
        assert "spawn_error ENOENT" in ghost.reason
        sup.status()  # answered (within the call's deadline) while the child keeps failing to spawn
        sup.wait_state("ok", "running")  # the healthy sibling comes up regardless


def test_a12_exit_codes_and_signals_are_reported_faithfully(tmp_path: Path, runtime_dir: Path) -> None:
    """exit 3, SIGSEGV, SIGABRT and SIGTERM each show as what they were."""
    kids = [fixture("svc", policy={"backoff_base": 0.01, "backoff_cap": 0.05, "intensity": 100})]
    with supervisor(tmp_path, runtime_dir, kids) as sup:
        for sig in (signal.SIGSEGV, signal.SIGABRT, signal.SIGTERM):
            pid = sup.child("svc").pid
            os.kill(pid, sig)
            c = wait_for(lambda: (c := sup.child("svc")).pid not in (None, pid) and c.state == "running" and c, 10, "restart")  # noqa: B023 (called within the iteration)
            if sig is signal.SIGTERM:
                assert c.last_exit.code == 0  # the fixture handles SIGTERM and exits 0: an unrequested clean exit
            else:
                assert c.last_exit.signal == sig.name
    kids = [fixture("three", "--exit-after", "0", "--exit-code", "3", policy={"backoff_base": 5})]
    with supervisor(tmp_path, runtime_dir, kids, wait_ready=False) as sup:
        c = sup.wait_state("three", "backoff")
        assert c.last_exit.code == 3 and c.last_exit.signal is None


def test_exit_78_is_shown_with_its_message_and_not_restarted(tmp_path: Path, runtime_dir: Path) -> None:
    """A configuration error is FATAL with the child's last stderr line; one start only."""
    ev = tmp_path / "ev"
    kids = [fixture("cfg", "--config-error", "CLANKIE_MODEL: unknown model", events=ev)]
    with supervisor(tmp_path, runtime_dir, kids, wait_ready=False) as sup:
        c = sup.wait_state("cfg", "fatal")
        assert c.reason == "config_error: CLANKIE_MODEL: unknown model" and c.next_start_at is None
        time.sleep(0.3)  # sleep: a restart of a FATAL child must not happen in this window
        assert len(events(ev, "START")) == 1


def test_a19_children_get_only_their_own_fds_and_the_supervisor_does_not_leak(tmp_path: Path, runtime_dir: Path) -> None:
    """After many restarts the supervisor's fd count is flat, and no systemd variable reaches a child."""
    kids = [fixture("svc", policy={"backoff_base": 0.001, "backoff_cap": 0.01, "intensity": 1000})]
    with supervisor(tmp_path, runtime_dir, kids, env={"NOTIFY_SOCKET": "/nonexistent", "WATCHDOG_USEC": "1", "JOURNAL_STREAM": "1:2"}) as sup:
        sup_ps = psutil.Process(sup.proc.pid)
        child = psutil.Process(sup.child("svc").pid)
        env = child.environ()
        assert "NOTIFY_SOCKET" not in env and "WATCHDOG_USEC" not in env and "JOURNAL_STREAM" not in env
        fds = {int(f) for f in os.listdir(f"/proc/{child.pid}/fd")}
        links = [os.readlink(f"/proc/{child.pid}/fd/{f}") for f in fds]
        assert sum(1 for t in links if t.startswith("pipe:")) <= 2 + 0  # stdout and stderr only
        before = sup_ps.num_fds()
        for _ in range(15):
            pid = sup.child("svc").pid
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: (c := sup.child("svc")).pid not in (None, pid) and c.state == "running", 10, "restart")  # noqa: B023 (called within the iteration)
        assert abs(sup_ps.num_fds() - before) <= 2


def test_a11_a_non_executable_program_is_a_spawn_error_eacces_with_backoff(tmp_path: Path, runtime_dir: Path) -> None:
    """A program file without an execute bit shows spawn_error EACCES, is retried through the backoff, and the supervisor keeps serving."""
    prog = tmp_path / "not-executable"
    prog.write_text("#!/bin/sh\nexit 0\n")
    prog.chmod(0o644)
    kids = [fixture("ok"), {"name": "noexec", "argv": [str(prog)], "policy": {"backoff_base": 0.2}}]
    with supervisor(tmp_path, runtime_dir, kids, wait_ready=False) as sup:
        c = wait_for(lambda: (c := sup.child("noexec")).restarts >= 2 and c, 10, "retries")
        assert "spawn_error EACCES" in c.reason and c.pid is None
        assert c.state in ("backoff", "starting")
        sup.status()  # answered (within the call's deadline) while the child keeps failing to spawn
        sup.wait_state("ok", "running")
        assert sup.proc.poll() is None


def test_a12_live_sigterm_abort_segv_and_exit_0_are_reported_and_restarted(tmp_path: Path, runtime_dir: Path) -> None:
    """An outside SIGTERM shows signal SIGTERM, abort SIGABRT without a core, SIGSEGV with a core when the limit allows, exit 0 code 0; each is restarted."""
    import resource

    cores = tmp_path / "cores"
    cores.mkdir()
    quick = {"backoff_base": 0.05, "backoff_cap": 0.1, "intensity": 100}
    ev = {n: tmp_path / f"ev-{n}" for n in ("term", "abort", "segv", "zero")}
    kids = [
        fixture("term", "--no-trap-term", events=ev["term"], policy=quick),
        fixture("abort", "--abort-self", "--exit-after", "0.2", events=ev["abort"], policy=quick),
        fixture("segv", "--segv", "--exit-after", "0.2", "--core-dir", str(cores), events=ev["segv"], policy=quick),
        fixture("zero", "--exit-after", "0.2", "--exit-code", "0", events=ev["zero"], policy=quick),
    ]
    with supervisor(tmp_path, runtime_dir, kids, wait_ready=False) as sup:
        pid = sup.wait_state("term", "running").pid
        os.kill(pid, signal.SIGTERM)  # not a requested stop: the supervisor did not ask
        c = wait_for(lambda: (c := sup.child("term")).pid not in (None, pid) and c.state == "running" and c, 10, "restart")
        assert c.last_exit.signal == "SIGTERM" and c.last_exit.code is None and c.restarts == 1
        assert "SIGTERM" in c.ended
        for name in ("abort", "segv", "zero"):
            wait_for(lambda: len(events(ev[name], "START")) >= 2, 15, f"{name} restarted")  # noqa: B023 (called within the iteration)
            assert sup.child(name).last_exit is not None
        abort = sup.child("abort").last_exit
        assert abort.signal == "SIGABRT" and abort.code is None and abort.core is False  # RLIMIT_CORE 0: no core
        segv = sup.child("segv").last_exit
        dumps_cores = resource.getrlimit(resource.RLIMIT_CORE)[1] != 0
        assert segv.signal == "SIGSEGV" and segv.code is None and segv.core is dumps_cores
        if dumps_cores:
            assert "core dumped" in sup.child("segv").ended
        zero = sup.child("zero")
        assert zero.last_exit.code == 0 and zero.last_exit.signal is None and zero.restarts >= 1
        assert "exited 0" in zero.ended


def _socket_inodes(pid: int) -> dict[int, int]:
    """fd -> socket inode for every socket ``pid`` holds."""
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            out[int(fd)] = int(target[len("socket:["):-1])
    return out


def _listening_inode(path: Path) -> int:
    """The inode of the listening unix socket bound to ``path`` (from /proc/net/unix).

    A connection it accepted is listed under the same path; only the listener has ``__SO_ACCEPTCON`` in its flags.
    """
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 8 and parts[7] == str(path) and int(parts[3], 16) & 0x10000:
            return int(parts[6])
    raise AssertionError(f"no listening socket at {path}")


def test_a19_a_child_starts_with_only_stdio_and_its_own_link(tmp_path: Path, runtime_dir: Path) -> None:
    """A child starts with fds 0, 1, 2 and its link only, and holds neither control.sock nor a sibling's link."""
    import subprocess
    import sys

    listing = "import os; print(' '.join(map(str, sorted(int(f) for f in os.listdir('/proc/self/fd')))))"
    baseline = {int(f) for f in subprocess.run([sys.executable, "-c", listing], capture_output=True, text=True, check=True).stdout.split()}
    kids = [fixture("a", "--fds", str(tmp_path / "fds-a")), fixture("b", "--fds", str(tmp_path / "fds-b"))]
    with supervisor(tmp_path, runtime_dir, kids) as sup:
        control = _listening_inode(sup.sock)
        sup_socks = set(_socket_inodes(sup.proc.pid).values())
        assert control in sup_socks
        pids = {c.name: c.pid for c in sup.status().children if c.pid is not None}
        for me, other in (("a", "b"), ("b", "a")):
            link_fd = int(psutil.Process(pids[me]).environ()["CLANKIE_SUPERVISOR_FD"])
            started_with = {int(f) for f in (tmp_path / f"fds-{me}").read_text().split()}
            assert started_with == baseline | {link_fd}, (started_with, baseline, link_fd)
            mine = _socket_inodes(pids[me])
            theirs = set(_socket_inodes(pids[other]).values())
            assert control not in mine.values()
            assert not set(mine.values()) & theirs  # no end of a sibling's link (or anything else of theirs)
            assert not set(mine.values()) & sup_socks  # nor any supervisor socket: its link end differs from ours
            assert link_fd in mine
