"""Issue 37's probe, run as a child of a real supervisor: dial control.sock from a process that is gone by the time
the supervisor looks at it.

Each try: SIGSTOP the supervisor (any process of its uid may) and wait until it is stopped; fork a child that
connects to ``control.sock`` and exits at once; reap it; SIGCONT the supervisor; then, on the socket the child
connected (this process holds it too), say hello and ask ``status``. The kernel recorded the gone child as the
peer. One JSON line per try goes to OUT: ``{"try": i, "verdict": "answered" | "refused: <why>"}``; a last try dials from
this process itself, alive and inside the tree.

    python control_probe.py SOCK OUT TRIES [SUPERVISOR_PID]

Without SUPERVISOR_PID it is the supervisor's own child (its parent is the supervisor) and, its verdicts written,
waits to be stopped, so the supervisor does not start it again; with it (a tool's ``bash`` deep in the tree) it exits.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

from clankie import ipc
from clankie.errors import ChannelBroken, RemoteError
from clankie.protocol import Empty


def stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        return fh.read().rsplit(b")", 1)[1].split()[0] == b"T"


async def ask(sock: socket.socket) -> str:
    try:
        conn = await ipc.from_socket(sock, "probe", initiate=True, timeout=30)
    except (ChannelBroken, RemoteError) as exc:
        return f"refused: {exc} ({exc.__cause__})"
    try:
        await conn.request("status", Empty(), timeout=30)
        return "answered"
    except (ChannelBroken, RemoteError) as exc:
        return f"refused: {exc} ({exc.__cause__})"
    finally:
        await conn.aclose()


def one_try(path: str, supervisor: int) -> str:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    os.kill(supervisor, signal.SIGSTOP)
    try:
        while not stopped(supervisor):
            time.sleep(0.001)  # sleep: the stop is delivered asynchronously; this loop checks that it landed
        child = os.fork()
        if child == 0:
            try:
                sock.connect(path)
            finally:
                os._exit(0)
        os.waitpid(child, 0)  # reaped: its pid names nobody now
    finally:
        os.kill(supervisor, signal.SIGCONT)
    return asyncio.run(ask(sock))


def main(path: str, out: Path, tries: int, supervisor_pid: int | None) -> None:
    if out.exists():  # started again by the supervisor after the test's run: probe once only
        signal.pause()
    supervisor = os.getppid() if supervisor_pid is None else supervisor_pid
    lines = []
    for i in range(tries):
        lines.append(json.dumps({"try": i, "verdict": one_try(path, supervisor)}))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)  # this process: alive, a child of the supervisor
    lines.append(json.dumps({"try": "alive", "verdict": asyncio.run(ask(sock))}))
    tmp = out.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.rename(out)
    if supervisor_pid is None:
        signal.pause()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else None)
