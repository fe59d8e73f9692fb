"""Issue 37 item 2: the metrics port cannot lock the operator out. 1,100 idle TCP connections to
CLANKIE_METRICS_LISTEN, with the tree under a 1,024-descriptor limit: ``clankiectl status`` still answers, a scrape
is still served past the cap, the idle ones are closed (evicted at the cap, or at the header-read timeout), and the
supervisor's log stays small.

Before, the port was served by aiohttp inside the supervisor with no cap and no timeout: 1,109 idle connections
made ``status`` and new scrapes fail, none was ever closed, and asyncio logged every failed accept.
"""

from __future__ import annotations

import resource
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hardening.test_control_socket_limits import clankiectl
from tests.supervisor.harness import fixture, supervisor, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

FLOOD = 1100
LIMIT = 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def idle() -> Iterator[list[socket.socket]]:
    """The flood's sockets, in this process, whose own soft fd limit is raised for them (and put back)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = FLOOD + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.fail(f"the test process may hold {hard} files; the flood needs {need}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    socks: list[socket.socket] = []
    yield socks
    for s in socks:
        s.close()
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def server_side(port: int) -> int:
    """Established TCP connections whose local end is ``port`` (/proc/net/tcp): the ones the server holds or has yet
    to accept. (A client whose handshake the kernel dropped at a full backlog thinks itself connected; the server
    holds nothing of it, so its socket is not counted, and it never hears a close.)"""
    held = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == "01":
            held += 1
    return held


def scrape(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=20) as reply:
        assert reply.status == 200
        return bytes(reply.read())


def test_1100_idle_connections_under_a_1024_fd_limit_leave_status_and_scrapes_working(
    tmp_path: Path, runtime_dir: Path, idle: list[socket.socket]
) -> None:
    """The flood is held to the cap, status and a scrape answer during it, every idle connection is closed by the
    server, the drops are counted by reason, and the flood is a line or two of log, not a line per connection."""
    port = free_port()
    env = {"CLANKIE_METRICS_LISTEN": f"127.0.0.1:{port}", "CLANKIE_METRICS_HEADER_SECONDS": "5"}
    with supervisor(tmp_path, runtime_dir, [fixture("svc")], env=env, nofile=LIMIT) as sup:
        for _ in range(FLOOD):  # one after another, each connected before the next (none lost at a full backlog)
            try:
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except TimeoutError:  # the server stopped accepting and its backlog is full
                break
        for _ in range(3):
            done = clankiectl(sup.sock, "status", "--json")
            assert done.returncode == 0, done.stderr
        body = scrape(port)  # past the cap: it takes the place of an idle connection
        assert b"clankie_child_up" in body
        wait_for(lambda: server_side(port) == 0, 120, lambda: f"the server to close every idle connection "
                 f"({server_side(port)} left)")
        body = scrape(port)
        dropped = {line.split(b'"')[1]: float(line.split()[-1]) for line in body.splitlines()
                   if line.startswith(b"clankie_metrics_connections_dropped_total{")}
        closed = dropped[b"evicted"] + dropped[b"refused"] + dropped[b"timeout"]
        assert len(idle) == FLOOD and closed >= FLOOD and dropped[b"evicted"] >= 1 and dropped[b"timeout"] >= 1, dropped
        assert dropped[b"accept_failed"] == 0, dropped  # it never ran out of descriptors
        done = clankiectl(sup.sock, "status", "--json")
        assert done.returncode == 0, done.stderr
        assert sup.proc.poll() is None
        log = sup.stderr()
        assert log.count("metrics port at its cap") == 1, log[-3000:]
        assert len(log.encode()) < 64 * 1024
