"""The child's side of the hand-over: inherited listeners, serving them, and a spare parked on its link."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from pathlib import Path

from clankie import ipc, sockfile
from clankie.handover import LISTEN_FDS_ENV, SPARE_ENV, inherited_listener, is_spare, listen_fds_value
from clankie.link import supervisor_link
from clankie.protocol import Empty, Record
from tests.polling import until


def test_an_inherited_listener_is_found_by_name_and_made_close_on_exec(runtime_dir: Path) -> None:
    """`service:N` gives back fd N as a listening socket, close-on-exec; other names and non-listeners give None."""

    async def body() -> None:
        sock = await sockfile.bind_listener(runtime_dir / "service.sock")
        fd = os.dup(sock.fileno())
        os.set_inheritable(fd, True)
        env = {LISTEN_FDS_ENV: listen_fds_value({"service": fd})}
        assert inherited_listener("browser", env) is None
        got = inherited_listener("service", env)
        assert got is not None and got.fileno() == fd and not got.get_inheritable()
        got.close()
        a, b = socket.socketpair()
        assert inherited_listener("service", {LISTEN_FDS_ENV: f"service:{a.fileno()}"}) is None
        assert a.fileno() >= 0  # left open: not ours to close
        for s in (a, b, sock):
            s.close()
        assert inherited_listener("service", {LISTEN_FDS_ENV: "service:notanfd"}) is None

    asyncio.run(body())


def test_a_server_on_an_inherited_socket_serves_it_and_leaves_the_file_to_its_owner(runtime_dir: Path) -> None:
    """ipc.serve(sock=...) answers clients on the given socket; closing it keeps the 0600 file and the listener."""

    async def handler(conn: ipc.Connection, method: str, params: Record) -> Record | None:
        return None

    async def body() -> None:
        path = runtime_dir / "tldraw.sock"
        owner = await sockfile.bind_listener(path)
        for _ in range(2):  # two lives of the server on one socket
            server = await ipc.serve(path, "tldraw", handler, sock=socket.socket(fileno=os.dup(owner.fileno())))
            conn = await ipc.connect(path, "service")
            await conn.aclose()
            await server.close()
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
        queued = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        queued.connect(os.fspath(path))  # nobody serves now: the dial waits in the owner's backlog, not refused
        queued.close()
        owner.close()

    asyncio.run(body())


def test_a_spare_parks_on_its_link_until_activated_or_stopped() -> None:
    """CLANKIE_SPARE=1: `parked` goes to the supervisor, activation waits for `activate`; `shutdown` ends it False."""

    async def run(activate: bool) -> tuple[list[str], bool]:
        heard: list[str] = []

        async def on_child(conn: ipc.Connection, method: str, params: Record) -> Record | None:
            heard.append(method)
            return None

        ours, theirs = socket.socketpair()
        child_fd = theirs.detach()  # the link owns it from here
        sup_task = asyncio.ensure_future(ipc.from_socket(ours, "supervisor", on_child, initiate=False))
        env = {"CLANKIE_SUPERVISOR_FD": str(child_fd), SPARE_ENV: "1"}
        assert is_spare(env)
        async with supervisor_link("fixture", env=env, interval=0.05) as link:
            sup = await sup_task
            waiting = asyncio.ensure_future(link.activation())
            await until(lambda: "parked" in heard, what="the spare to park", step=0.005)
            assert not waiting.done()
            await sup.notify("activate" if activate else "shutdown", Empty() if activate else _stopping())
            result = await waiting
        await sup.aclose()
        return heard, result

    def _stopping() -> Record:
        from clankie.protocol import Stopping

        return Stopping(reason="test")

    heard, activated = asyncio.run(run(True))
    assert activated and "parked" in heard
    heard, activated = asyncio.run(run(False))
    assert not activated
