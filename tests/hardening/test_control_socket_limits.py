"""Issue 14 item 3: idle or hostile clients of control.sock never lock the operator out (real sockets, real processes).

128 idle connections used to fill control.sock for as long as they stayed
open. Now: a hello deadline, an idle timeout, a per-pid cap, slots reserved
for root, and eviction of the idlest connection (clankie.limits). Each test
runs a real `clankie run` on fixture children, real holder processes
(tests/hardening/holder.py) and the real `clankiectl`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.supervisor.harness import FIXTURE, REPO, fixture, listening, supervisor, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

HOLDER = Path(__file__).with_name("holder.py")
CLANKIECTL = Path(sys.executable).with_name("clankiectl")
SITE = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())


class Holder:
    """One holder process; ``open()`` asks it how many of its connections are still open."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        assert proc.stdout is not None
        self.opened = json.loads(proc.stdout.readline())["opened"]

    def open(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("?\n")
        self.proc.stdin.flush()
        return int(json.loads(self.proc.stdout.readline())["open"])


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def hold(procs: list[subprocess.Popen[str]], sock: Path, count: int, *, silent: bool = False, user: int | None = None) -> Holder:
    argv = [sys.executable, str(HOLDER), str(sock), str(count), *(["--silent"] if silent else [])]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": SITE}
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "/usr/bin/python3", *argv[1:]]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd="/")
    procs.append(proc)
    return Holder(proc)


def clankiectl(sock: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [str(CLANKIECTL), "--socket", str(sock), "--timeout", "10", *args],
        capture_output=True, text=True, env=env, timeout=60,
    )


def test_a_flood_of_idle_connections_from_many_processes_does_not_lock_clankiectl_out(
    tmp_path: Path, runtime_dir: Path, holders: list[subprocess.Popen[str]]
) -> None:
    """160 idle, hello'd connections from 16 processes (twice the cap): clankiectl still answers, every time."""
    env = {"CLANKIE_CONTROL_IDLE_SECONDS": "3600"}  # the idle timeout is not what saves us here
    with supervisor(tmp_path, runtime_dir, [fixture("svc")], env=env) as sup:
        flood = [hold(holders, sup.sock, 10) for _ in range(16)]
        assert all(h.opened <= 8 for h in flood)  # the per-pid cap (CLANKIE_CONTROL_PER_PID_CONNECTIONS)
        assert sum(h.open() for h in flood) <= 64  # the total cap: the rest were refused or evicted
        for _ in range(3):
            done = clankiectl(sup.sock, "status", "--json")
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["children"][0]["name"] == "svc"
        assert sup.proc.poll() is None


def test_idle_and_silent_connections_are_closed_by_the_server(
    tmp_path: Path, runtime_dir: Path, holders: list[subprocess.Popen[str]]
) -> None:
    """A peer that never says hello is dropped after the hello deadline; a quiet one after the idle timeout."""
    env = {"CLANKIE_CONTROL_IDLE_SECONDS": "1", "CLANKIE_IPC_HELLO_SECONDS": "1"}
    with supervisor(tmp_path, runtime_dir, [fixture("svc")], env=env) as sup:
        silent = hold(holders, sup.sock, 5, silent=True)
        quiet = hold(holders, sup.sock, 5)
        assert silent.opened == 5 and quiet.opened == 5
        wait_for(lambda: silent.open() == 0, 20, "the server to drop the connections that never said hello")
        wait_for(lambda: quiet.open() == 0, 20, "the server to close the idle connections")
        done = clankiectl(sup.sock, "logs", "svc", "-n", "1")  # a working client is not idle while it is answered
        assert done.returncode == 0, done.stderr


def test_root_gets_through_on_its_reserved_slots_while_the_services_uid_holds_all_of_its_own(
    tmp_path: Path, runtime_dir: Path, holders: list[subprocess.Popen[str]]
) -> None:
    """The tree runs as nobody (as under DynamicUser=); nobody's processes fill nobody's share; root's clankiectl
    is admitted on the reserve, without evicting anyone."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None or not Path("/usr/bin/python3").exists():
        pytest.skip("needs root, setpriv and /usr/bin/python3 to run the tree as another uid")
    nobody = 65534
    runtime_dir.chmod(0o711)  # our own test dir: nobody may pass through it (tmp_path is root's 0700)
    state = runtime_dir / "state"
    run = runtime_dir / "run"
    for d in (state, run):
        d.mkdir(mode=0o700)
        os.chown(d, nobody, nobody)
    spec = runtime_dir / "spec.json"
    spec.write_text(json.dumps([{"name": "svc", "argv": ["{python}", str(FIXTURE)], "stop_timeout": 1.0}]))
    env = {
        "PATH": "/usr/bin:/bin", "HOME": str(state), "PYTHONPATH": f"{REPO}:{SITE}",
        "CLANKIE_STATE": str(state), "CLANKIE_RUNTIME_DIR": str(run),
        "CLANKIE_CONTROL_MAX_CONNECTIONS": "16", "CLANKIE_CONTROL_IDLE_SECONDS": "3600",
    }
    argv = ["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups",
            "/usr/bin/python3", "-m", "supervisor", "run", "--spec-file", str(spec)]
    err = (tmp_path / "supervisor.stderr").open("wb")
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=err, stderr=err, cwd=REPO)
    sock = run / "control.sock"
    try:
        wait_for(lambda: listening(sock) or proc.poll() is not None, 20, "the control socket")
        assert proc.poll() is None, (tmp_path / "supervisor.stderr").read_text()
        share = [hold(holders, sock, 8, user=nobody), hold(holders, sock, 8, user=nobody)]
        assert sum(h.open() for h in share) == 14  # 16 minus root's 2 reserved slots
        done = clankiectl(sock, "status")
        assert done.returncode == 0, done.stderr
        assert sum(h.open() for h in share) == 14  # nobody was evicted to let root in
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        err.close()
