"""A supervisor whose own stderr stalls keeps supervising: real supervisor, real pipe nobody reads."""

from __future__ import annotations

import fcntl
import itertools
import os
import re
from pathlib import Path

import pytest

from clankie.protocol import StatusReply
from tests.polling import until_sync
from tests.supervisor.harness import events, fixture, supervisor, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

LINES = 200_000


def read_until(fd: int, want: bytes, timeout: float) -> bytes:
    """Read a non-blocking pipe until ``want`` shows up (or it ends); fail with its tail after ``timeout`` s."""
    got = bytearray()

    def seen() -> bool:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return want in got
            if not chunk:
                return True  # the writer is gone: what came is all there is
            got.extend(chunk)

    until_sync(seen, timeout, lambda: f"{want!r} on stderr; its tail: {bytes(got[-500:])!r}")
    return bytes(got)


def test_a_wedged_stderr_never_wedges_the_supervisor(tmp_path: Path, runtime_dir: Path) -> None:
    """With stderr a full pipe nobody reads, status answers, heartbeats count, the log file has every byte, and a drop notice follows."""
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
    ev = tmp_path / "ev"
    kids = [
        fixture("steady", heartbeat_timeout=10.0),
        # its own loop is busy printing for a while: it gets a generous heartbeat timeout of its own
        fixture("chatty", "--print-lines", str(LINES), events=ev, heartbeat_timeout=30.0),
    ]
    try:
        with supervisor(tmp_path, runtime_dir, kids, stderr_fd=w) as sup:
            os.close(w)
            w = -1
            pid = events(ev, "START")[0][2]
            expected = f"started {pid}\n".encode() + b"".join(f"line {i}\n".encode() for i in range(LINES))
            log_file = sup.state / "logs" / "chatty.log"
            wait_for(lambda: log_file.stat().st_size >= len(expected), 30, "every chatty byte in its log file")
            assert log_file.read_bytes() == expected
            # A supervisor wedged on its stderr would answer nothing and read no heartbeat: status answers (each
            # within the call's deadline) and steady's heartbeat age keeps falling back, so heartbeats are read.
            ages: list[float] = []

            def heartbeats_read() -> StatusReply | None:
                st = sup.status()
                for c in st.children:
                    assert c.state == "running" and c.restarts == 0, c
                steady = next(c for c in st.children if c.name == "steady")
                assert steady.last_heartbeat_age_s is not None
                ages.append(steady.last_heartbeat_age_s)
                return st if sum(later < earlier for earlier, later in itertools.pairwise(ages)) >= 3 else None

            st = until_sync(heartbeats_read, 30, lambda: f"steady's heartbeats to be read: ages {ages[-10:]}", 0.05)
            dropped = st.supervisor.stderr_dropped
            assert dropped > 0
            os.set_blocking(r, False)
            out = read_until(r, b"lines (", 15)
            notice = re.search(rb"dropped (\d+) lines \((\d+) since start\)", out)
            assert notice is not None, out[-500:]
            assert int(notice.group(2)) >= dropped
            assert b"chatty| line " in out  # the newest lines survive; the oldest were the ones dropped
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
