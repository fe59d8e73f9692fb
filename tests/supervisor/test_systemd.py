"""sd_notify against a real datagram socket, and the watchdog ping from the supervising loop."""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import statistics
import time
from pathlib import Path

from clankie import settings as settings_mod
from clankie.clock import SystemClock
from supervisor.systemd import Notifier, scrub
from supervisor.tree import Tree


def listener(address: str | bytes) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(2)
    return sock


def test_b28_path_socket_receives_ready_status_and_stopping(runtime_dir: Path) -> None:
    """With NOTIFY_SOCKET a path, READY=1/STATUS=/STOPPING=1 arrive as single datagrams."""
    path = str(runtime_dir / "notify")
    with listener(path) as sock:
        n = Notifier({"NOTIFY_SOCKET": path})
        assert n.ready("4/4 running")
        assert sock.recv(4096) == b"READY=1\nSTATUS=4/4 running"
        n.stopping()
        assert sock.recv(4096) == b"STOPPING=1"


def test_b28_abstract_socket_works() -> None:
    """An @abstract NOTIFY_SOCKET is reached through the abstract namespace."""
    name = f"clankie-test-{os.getpid()}-{time.monotonic_ns()}"
    with listener(b"\0" + name.encode()) as sock:
        assert Notifier({"NOTIFY_SOCKET": "@" + name}).watchdog()
        assert sock.recv(4096) == b"WATCHDOG=1"


def test_b28_unset_or_broken_socket_never_raises(runtime_dir: Path, caplog: object) -> None:
    """Outside systemd nothing is sent; a missing socket is counted and logged once, never raised."""
    assert not Notifier({}).ready("x") and not Notifier({}).enabled
    n = Notifier({"NOTIFY_SOCKET": str(runtime_dir / "nope")})
    for _ in range(3):
        assert not n.watchdog()
    assert n.failures == 3
    assert not Notifier({"NOTIFY_SOCKET": "vsock:1:2"}).enabled


def test_watchdog_usec_honours_watchdog_pid_and_children_never_see_it(runtime_dir: Path) -> None:
    """The ping interval is half WATCHDOG_USEC for our pid only; these variables are scrubbed from children."""
    env = {"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid()), "KEEP": "1"}
    assert Notifier(env).watchdog_interval() == 15.0
    assert Notifier({**env, "WATCHDOG_PID": "1"}).watchdog_interval() is None
    assert scrub({**env, "LISTEN_FDS": "3"}) == {"KEEP": "1"}


def test_b27_watchdog_pings_stop_while_the_loop_is_wedged(env: dict[str, str], runtime_dir: Path) -> None:
    """WATCHDOG=1 comes every WATCHDOG_USEC/2 from the supervising loop, and not at all while it is wedged."""
    path = str(runtime_dir / "notify")
    sock = listener(path)
    notifier = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "100000"})
    tree = Tree(settings_mod.load(env), [], clock=SystemClock(), env=env, notifier=notifier, subreaper=False)
    received: list[float] = []
    other: list[bytes] = []

    async def go() -> None:
        loop = asyncio.get_running_loop()
        sock.setblocking(False)
        done = asyncio.Event()
        task = asyncio.create_task(tree.run(done))
        reader_sock = sock

        def on_ping() -> None:
            while True:
                try:
                    data = reader_sock.recv(4096)
                    if data == b"WATCHDOG=1":
                        received.append(time.monotonic())
                    else:
                        other.append(data)
                except BlockingIOError:
                    return

        loop.add_reader(sock.fileno(), on_ping)
        await asyncio.sleep(0.3)  # sleep: pings are real time (WATCHDOG_USEC): some before the wedge,
        time.sleep(0.5)  # sleep: the supervising loop wedged (no ping may come),
        await asyncio.sleep(0.3)  # sleep: and some after it
        done.set()
        await task
        on_ping()
        loop.remove_reader(sock.fileno())

    asyncio.run(go())
    sock.close()
    gaps = [b - a for a, b in itertools.pairwise(received)]
    assert max(gaps) >= 0.45  # the wedge
    # the cadence, as the median gap: a gap is measured where this same loop reads the pings, so a moment the worker
    # is descheduled can read two pings at once (a gap of ~0) and leave the gap before it long; the median is neither
    assert 0.03 <= statistics.median(gaps) <= 0.1, gaps
    assert other[0].startswith(b"READY=1")  # an empty tree is ready at once
    assert other[-1].startswith(b"STOPPING=1")
