"""The child's end of the supervisor link: one helper every child uses.

Usage in a child's ``main`` (after :func:`clankie.child.arm_parent_death`)::

    async with supervisor_link("service", handler, report, clock=clock,
                               interval=settings.heartbeat_seconds) as link:
        ...  # start serving
        await link.ready()
        await link.shutdown.wait()   # set on `shutdown` from the supervisor or link loss

The link connects over the socket inherited on ``CLANKIE_SUPERVISOR_FD``.
With no such fd (a process started by hand) it is a no-op: ``ready`` does
nothing and ``shutdown`` is set only by :meth:`Link.request_shutdown`.
On the wire the child speaks the ``child`` role and the supervisor the
``supervisor`` role (see :data:`clankie.protocol.METHODS`).

``handler`` answers the supervisor's requests (``abort_run``, ``lanes``,
``say``) exactly like an :mod:`clankie.ipc` handler; pass None for a child that
serves none of them (they are answered ``method_not_found``). ``report``
returns the :class:`~clankie.protocol.Heartbeat` to send (``seq`` is filled in
by the link); it is called every ``interval`` seconds from the child's loop,
so a wedged loop stops the heartbeats and the supervisor notices.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable, Mapping

from clankie import ipc
from clankie.child import SUPERVISOR_FD_ENV, exit_if_orphaned
from clankie.clock import Clock, SystemClock
from clankie.errors import ChannelBroken, ChannelClosed, RemoteError
from clankie.protocol import Empty, Heartbeat, Record, Stopping
from clankie.settings import discord_attachment_root

log = logging.getLogger(__name__)

HeartbeatReport = Callable[[], Heartbeat]

LINK_ROLE = "child"


def link_fd(env: Mapping[str, str] | None = None) -> int | None:
    """The inherited link fd, or None when not started by a supervisor."""
    raw = (os.environ if env is None else env).get(SUPERVISOR_FD_ENV, "")
    return int(raw) if raw.isdigit() else None


class Link:
    """A live (or absent) link to the supervisor."""

    def __init__(self, name: str, conn: ipc.Connection | None) -> None:
        self.name = name
        self.conn = conn
        self.shutdown = asyncio.Event()
        self.shutdown_reason = ""
        self.seq = 0

    @property
    def connected(self) -> bool:
        return self.conn is not None and not self.conn.closed

    async def ready(self) -> None:
        """Tell the supervisor this child is serving."""
        await self._notify("ready", Empty())

    async def stopping(self, reason: str = "") -> None:
        """Tell the supervisor this child is on its way out (sent on exit too)."""
        await self._notify("stopping", Stopping(reason=reason[:200]))

    async def beat(self, report: Heartbeat) -> None:
        """Send one heartbeat now (the loop does this every interval)."""
        self.seq += 1
        await self._notify("heartbeat", report.model_copy(update={"seq": self.seq}))

    def request_shutdown(self, reason: str) -> None:
        if not self.shutdown.is_set():
            self.shutdown_reason = reason
            self.shutdown.set()

    async def _notify(self, method: str, record: Record) -> None:
        if not self.connected:
            return
        assert self.conn is not None
        with contextlib.suppress(ChannelBroken, ChannelClosed):
            await self.conn.notify(method, record)


def _default_report() -> Heartbeat:
    return Heartbeat()


@contextlib.asynccontextmanager
async def supervisor_link(
    name: str,
    handler: ipc.Handler | None = None,
    report: HeartbeatReport | None = None,
    *,
    clock: Clock | None = None,
    interval: float = 2.0,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[Link]:
    """Connect to the supervisor (if any), heartbeat while inside, say ``stopping`` on exit."""
    fd = link_fd(env)
    if fd is None:
        yield Link(name, None)
        return
    clock = clock or SystemClock()
    report = report or _default_report
    link_box: list[Link] = []

    async def on_request(conn: ipc.Connection, method: str, params: Record) -> Record | None:
        if method == "shutdown":
            assert isinstance(params, Stopping)
            link_box[0].request_shutdown(params.reason or "supervisor asked")
            return None
        if handler is None:
            raise RemoteError("method_not_found", f"{name} serves no {method}")
        return await handler(conn, method, params)

    sock = socket.socket(fileno=fd)
    root = str(discord_attachment_root(env))  # the child's own reading, reported in its hello
    conn = await ipc.from_socket(sock, LINK_ROLE, on_request, initiate=True, attachment_root=root)
    link = Link(name, conn)
    link_box.append(link)

    async def beat_loop() -> None:
        while not conn.closed:
            try:
                await link.beat(report())
            except Exception:
                log.exception("heartbeat report failed")
            await clock.sleep(interval)

    async def watch_link() -> None:
        await conn.wait_closed()
        exit_if_orphaned(env)  # the supervisor died: our group goes now, not after a graceful stop
        link.request_shutdown("supervisor link closed")

    tasks = [
        asyncio.create_task(beat_loop(), name=f"{name}-heartbeat"),
        asyncio.create_task(watch_link(), name=f"{name}-link-watch"),
    ]
    try:
        yield link
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await link.stopping(link.shutdown_reason or "exiting")
        await conn.aclose()
