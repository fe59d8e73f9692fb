"""Supervisor faults, systemd notification, logs and clankiectl against a real supervisor (§7 B, C48)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from clankie.protocol import AbortRun, ChildTarget, LogsRequest, SayRequest
from supervisor import ctl
from tests.supervisor.harness import FIXTURE, REPO, events, fixture, pid_alive, supervisor, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

FOUR = ("service", "bridge", "browser", "tldraw")


def four(ev: Path, *extra: str, **spec: object) -> list[dict[str, object]]:
    return [fixture(n, *extra, events=ev.with_name(f"ev-{n}"), proxy=n == "service", **spec) for n in FOUR]


def test_b22_kill_9_of_the_supervisor_leaves_no_child_or_grandchild(tmp_path: Path, runtime_dir: Path) -> None:
    """SIGKILL the supervisor: all four children and their grandchildren are gone within a second."""
    ev = tmp_path / "ev"
    with supervisor(tmp_path, runtime_dir, four(ev, "--grandchildren", "2")) as sup:
        grand = wait_for(
            lambda: all(len(events(ev.with_name(f"ev-{n}"), "GRANDCHILD")) == 2 for n in FOUR), 10, "grandchildren"
        )
        assert grand
        pids = [c.pid for c in sup.status().children if c.pid is not None]
        pids += [p for n in FOUR for _, _, p in events(ev.with_name(f"ev-{n}"), "GRANDCHILD")]
        assert len(pids) == 12
        sup.proc.kill()
        sup.proc.wait()
        wait_for(lambda: not any(pid_alive(p) for p in pids), 1.0, "every descendant gone")


def test_b23_a_child_whose_supervisor_is_already_gone_exits_at_once(tmp_path: Path) -> None:
    """A child that finds its parent is not the supervisor that spawned it leaves instead of running orphaned."""
    env = {**os.environ, "CLANKIE_SUPERVISOR_PID": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(FIXTURE)], env=env, capture_output=True, timeout=20)  # an orphan never ends
    assert proc.returncode == 70 and b"is gone" in proc.stderr


def test_b24_sigterm_stops_in_reverse_order_sends_stopping_and_removes_the_socket(tmp_path: Path, runtime_dir: Path) -> None:
    """SIGTERM: children stop last-started first, STOPPING=1 is sent, exit 0, control.sock removed."""
    ev = tmp_path / "ev"
    notify = runtime_dir / "notify"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify))
    listener.settimeout(5)
    with supervisor(tmp_path, runtime_dir, four(ev), env={"NOTIFY_SOCKET": str(notify)}) as sup:
        sup.proc.send_signal(signal.SIGTERM)
        assert sup.proc.wait(10) == 0
        assert not sup.sock.exists()
        assert "did not stop within" not in sup.stderr()  # each child stopped on SIGTERM: no grace ran out
    exits = sorted((events(ev.with_name(f"ev-{n}"), "EXIT")[0][1], n) for n in FOUR)
    assert [n for _, n in exits] == list(reversed(FOUR))
    messages = []
    listener.settimeout(0.5)
    try:
        while True:
            messages.append(listener.recv(4096))
    except (TimeoutError, BlockingIOError):
        pass
    listener.close()
    ready = [m for m in messages if m.startswith(b"READY=1")]
    assert len(ready) == 1 and b"4/4 running" in ready[0]
    assert any(m.startswith(b"STOPPING=1") for m in messages)


def test_b25_a_second_sigterm_kills_at_once(tmp_path: Path, runtime_dir: Path) -> None:
    """During a slow stop, a second SIGTERM SIGKILLs what is left instead of waiting out the grace."""
    kids = [fixture("stubborn", "--ignore-term", stop_timeout=30)]
    with supervisor(tmp_path, runtime_dir, kids) as sup:
        pid = sup.child("stubborn").pid
        sup.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: "stop requested" in sup.stderr(), 5, "stop begun")
        sup.proc.send_signal(signal.SIGINT)
        assert sup.proc.wait(15) == 0  # well inside the child's 30 s grace
        assert "forced stop: killing every child now" in sup.stderr() and not pid_alive(pid)


def test_b26_the_stop_budget_bounds_a_slow_child(tmp_path: Path, runtime_dir: Path) -> None:
    """A child whose grace is longer than the stop budget is SIGKILLed before the supervisor's deadline."""
    kids = [fixture("slow", "--ignore-term", stop_timeout=30)]
    with supervisor(tmp_path, runtime_dir, kids, args=("--stop-budget", "1")) as sup:
        pid = sup.child("slow").pid
        sup.proc.send_signal(signal.SIGTERM)
        assert sup.proc.wait(15) == 0  # well inside the child's 30 s grace: the budget, not the grace, ended it
        grace = re.search(r"slow did not stop within ([0-9.]+)s; killing it", sup.stderr())
        assert grace is not None and float(grace.group(1)) <= 1.0 and not pid_alive(pid)  # the budget's grace, not 30 s


def test_b29_ready_is_sent_only_when_every_child_is_ready(tmp_path: Path, runtime_dir: Path) -> None:
    """One child that never says ready holds READY=1 back, and STATUS= names it after its start timeout."""
    notify = runtime_dir / "notify"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify))
    listener.settimeout(3)
    kids = [fixture("fine"), fixture("late", "--no-ready", start_timeout=0.3)]
    with supervisor(tmp_path, runtime_dir, kids, env={"NOTIFY_SOCKET": str(notify)}, wait_ready=False) as sup:
        got: list[bytes] = []

        def named() -> bool:
            try:
                got.append(listener.recv(4096))
            except TimeoutError:
                return False
            return b"late not ready after" in got[-1]

        wait_for(named, 10, "STATUS naming the late child")
        assert not any(m.startswith(b"READY=1") for m in got)
        assert sup.child("late").state == "starting"
    listener.close()


def test_c48_status_json_has_every_contract_field(tmp_path: Path, runtime_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`clankiectl status --json` has the ARCHITECTURE §9 keys for the supervisor and every child."""
    ev = tmp_path / "ev"
    with supervisor(tmp_path, runtime_dir, four(ev)) as sup:
        assert ctl.main(["--socket", str(sup.sock), "status", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
    assert set(doc["supervisor"]) >= {"pid", "uptime_s", "state"}
    keys = {"name", "state", "pid", "uptime_s", "restarts", "last_exit", "next_start_at", "cpu_percent", "rss_bytes",
            "num_fds", "detail"}
    assert [c["name"] for c in doc["children"]] == list(FOUR)
    for c in doc["children"]:
        assert set(c) >= keys and c["state"] == "running" and c["rss_bytes"] > 0 and c["num_fds"] > 0


def test_clankiectl_restart_stop_start_and_proxied_commands(tmp_path: Path, runtime_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """restart gives a new pid, stop/start work by name, and lanes/abort/say reach the service over its link."""
    ev = tmp_path / "ev"
    with supervisor(tmp_path, runtime_dir, four(ev)) as sup:
        sock = ["--socket", str(sup.sock)]
        old = sup.child("bridge").pid
        assert ctl.main([*sock, "restart", "bridge"]) == 0
        new = sup.wait_state("bridge", "running")
        assert new.pid != old and new.last_exit.code == 0
        assert ctl.main([*sock, "stop", "tldraw"]) == 0 and sup.child("tldraw").state == "stopped"
        assert ctl.main([*sock, "start", "tldraw"]) == 0
        sup.wait_state("tldraw", "running")
        capsys.readouterr()
        assert ctl.main([*sock, "lanes", "--json"]) == 0
        lanes = json.loads(capsys.readouterr().out)["lanes"]
        assert set(lanes[0]) >= {"key", "warm", "state", "run_id", "last_event_age_s", "turns"}
        assert ctl.main([*sock, "say", "discord:1:2", "hello", "--json"]) == 0
        said = json.loads(capsys.readouterr().out)
        assert said["outcome"] == "settled" and said["text"] == "heard: hello" and set(said) >= {"turn_id", "media", "code"}
        assert ctl.main([*sock, "abort", "discord:clankie:discord:1:2"]) == 0
        assert events(ev.with_name("ev-service"), "REQUEST-abort_run")
        assert ctl.main([*sock, "restart", "nobody"]) == 1
        assert ctl.main([*sock, "shutdown"]) == 0
        assert sup.proc.wait(10) == 0


def test_logs_are_captured_complete_rotated_and_forwarded(tmp_path: Path, runtime_dir: Path) -> None:
    """A child writing 10 MB then _exit-ing loses no byte; lines reach our stderr prefixed with its name."""
    ev = tmp_path / "ev"
    kids = [
        fixture("spew", "--spew-bytes", str(10 * 1024 * 1024), events=ev, policy={"backoff_base": 60}),
        fixture("talk", "--print-lines", "3"),
    ]
    with supervisor(tmp_path, runtime_dir, kids, wait_ready=False) as sup:
        sup.wait_state("spew", "backoff")
        logs = sup.state / "logs"
        size = sum(p.stat().st_size for p in logs.glob("spew.log*"))  # it crossed the 10 MiB rotation point
        assert size == 10 * 1024 * 1024 + len(f"started {events(ev, 'START')[0][2]}\n")
        wait_for(lambda: "talk| line 2" in sup.stderr(), 5, "forwarded lines")
        reply = sup.call("logs", LogsRequest(name="talk", lines=2))
        assert reply.data == b"line 1\nline 2\n"


def test_logs_rotate_past_the_size_limit(tmp_path: Path) -> None:
    """The per-child log rolls to .1 … .N and never grows without bound."""
    from supervisor.output import RotatingLog

    log = RotatingLog(tmp_path / "x.log", max_bytes=1000, backups=2)
    for _ in range(50):
        log.write(b"y" * 99 + b"\n")
    log.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["x.log", "x.log.1", "x.log.2"]
    assert all(p.stat().st_size <= 1000 for p in tmp_path.iterdir())


def test_the_operator_sets_the_child_log_size_and_how_many_rolled_logs_are_kept(tmp_path: Path, runtime_dir: Path) -> None:
    """At the bound: a child writing 1 MB under a 64 KiB roll keeping two leaves three files, none over 64 KiB."""
    kids = [fixture("spew", "--spew-bytes", str(1024 * 1024), policy={"backoff_base": 60})]
    env = {"CLANKIE_CHILD_LOG_ROTATE_BYTES": str(64 * 1024), "CLANKIE_CHILD_LOG_BACKUPS": "2"}
    with supervisor(tmp_path, runtime_dir, kids, env=env, wait_ready=False) as sup:
        sup.wait_state("spew", "backoff")
        logs = sup.state / "logs"
        assert sorted(p.name for p in logs.glob("spew.log*")) == ["spew.log", "spew.log.1", "spew.log.2"]
        assert all(p.stat().st_size <= 64 * 1024 for p in logs.glob("spew.log*"))


def test_status_reports_psutil_fields_for_a_running_child(tmp_path: Path, runtime_dir: Path) -> None:
    """cpu %, rss, fds and threads in status match what psutil sees for that pid."""
    with supervisor(tmp_path, runtime_dir, [fixture("svc")]) as sup:
        c = sup.child("svc")
        p = psutil.Process(c.pid)
        assert c.threads == p.num_threads() and abs(c.num_fds - p.num_fds()) <= 2
        assert c.rss_bytes > 1_000_000 and c.last_heartbeat_age_s is not None


def test_operator_abort_is_sent_with_reason_operator(tmp_path: Path, runtime_dir: Path) -> None:
    """`abort LANE` goes to the service as abort_run with reason operator."""
    ev = tmp_path / "ev"
    with supervisor(tmp_path, runtime_dir, [fixture("service", events=ev, proxy=True)]) as sup:
        reply = sup.call("abort", AbortRun(lane="L", reason="stalled"))
        assert reply.aborted
        assert [e[0] for e in events(ev) if e[0].startswith("ABORT-")] == ["ABORT-operator"]  # not "stalled"
        said = sup.call("say", SayRequest(room="r", text="x"))
        assert said.outcome == "settled"
        assert sup.call("stop", ChildTarget(name="service")).ok
