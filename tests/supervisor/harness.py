"""Boot a real supervisor process on fixture children and talk to it like clankiectl does."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import resource
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from clankie import ipc
from clankie.errors import ChannelBroken
from clankie.protocol import Empty, Record, StatusReply
from tests.polling import until_sync
from tests.procstat import stat_fields

FIXTURE = Path(__file__).parent / "fixtures" / "child.py"
REPO = Path(__file__).resolve().parents[2]


def fixture(name: str, *flags: str, events: Path | None = None, **spec: Any) -> dict[str, Any]:
    """A child spec running the fixture child with ``flags``."""
    argv = ["{python}", str(FIXTURE), *flags]
    if events is not None:
        argv += ["--events", str(events)]
    base: dict[str, Any] = {"name": name, "argv": argv, "stop_timeout": 1.0}
    base.update(spec)
    return base


wait_for = until_sync
"""Poll a real-world condition until it holds (real processes, no event loop here: :func:`tests.polling.until_sync`)."""


def events(path: Path, kind: str | None = None) -> list[tuple[str, int, int]]:
    """The START/READY/EXIT lines a fixture child wrote: (kind, monotonic ns, pid)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and (kind is None or parts[0] == kind):
            out.append((parts[0], int(parts[1]), int(parts[2])))
    return out


def _limit_files(nofile: int) -> None:
    """In the supervisor's process before it runs: RLIMIT_NOFILE, soft and hard, for the whole tree."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))


def pid_alive(pid: int) -> bool:
    try:
        return stat_fields(pid)[0] != "Z"
    except FileNotFoundError:
        return False


class Running:
    """A supervisor process under test."""

    def __init__(self, proc: subprocess.Popen[bytes], runtime: Path, state: Path, stderr: Path) -> None:
        self.proc = proc
        self.runtime = runtime
        self.state = state
        self.stderr_path = stderr
        self.sock = runtime / "control.sock"

    def call(self, method: str, params: Record | None = None, timeout: float = 10.0) -> Any:  # the reply, validated against the method table by the connection
        async def go() -> Record:
            conn = await ipc.connect(self.sock, "test", timeout=timeout)
            try:
                return await conn.request(method, params or Empty(), timeout=timeout)
            finally:
                await conn.aclose()

        return asyncio.run(go())

    def status(self) -> StatusReply:
        reply = self.call("status")
        assert isinstance(reply, StatusReply)
        return reply

    def child(self, name: str) -> Any:
        return next(c for c in self.status().children if c.name == name)

    def wait_state(self, name: str, state: str, timeout: float = 10.0) -> Any:
        return wait_for(lambda: (c := self.child(name)).state == state and c, timeout, f"{name} {state}")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def listening(sock: Path) -> bool:
    """The socket file exists and takes connections (between its bind and its listen it refuses them)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(sock))
        except OSError:
            return False
    return True


def _answers(run: Running) -> bool:
    """The control socket exists and answers (between its bind and its listen it refuses)."""
    if not run.sock.exists():
        return False
    try:
        run.status()
    except ChannelBroken:
        return False
    return True


@contextlib.contextmanager
def supervisor(
    tmp: Path,
    runtime: Path,
    children: list[dict[str, Any]] | None,
    *,
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
    wait_ready: bool = True,
    ready_timeout: float = 15.0,
    stderr_fd: int | None = None,
    nofile: int | None = None,
) -> Iterator[Running]:
    state = tmp / "state"
    state.mkdir(exist_ok=True, mode=0o700)
    spec_args: list[str] = []
    if children is not None:  # None: the real default tree
        spec = tmp / "spec.json"
        spec.write_text(json.dumps(children))
        spec_args = ["--spec-file", str(spec)]
    full_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(state),
        "CLANKIE_STATE": str(state),
        "CLANKIE_RUNTIME_DIR": str(runtime),
        "CLANKIE_HEARTBEAT_SECONDS": "0.1",
        "CLANKIE_STALL_TICK_SECONDS": "0.1",
        "CLANKIE_HEARTBEAT_TIMEOUT_SECONDS": "5",
        "PYTHONPATH": str(REPO),
    }
    full_env.update(env or {})
    err = tmp / "supervisor.stderr"
    with err.open("wb") as errf:
        proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "run", *spec_args, *args],
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=errf,
            stderr=errf if stderr_fd is None else stderr_fd,
            cwd=REPO,
            preexec_fn=None if nofile is None else functools.partial(_limit_files, nofile),
        )
    run = Running(proc, runtime, state, err)
    try:
        wait_for(lambda: _answers(run) or proc.poll() is not None, max(ready_timeout, 30), "control socket")
        if proc.poll() is not None:
            raise AssertionError(f"supervisor exited {proc.returncode}: {run.stderr()}")
        if wait_ready:
            wait_for(lambda: all(c.state == "running" for c in run.status().children), ready_timeout, "all running")
        yield run
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
