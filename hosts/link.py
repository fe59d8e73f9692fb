"""A host's end of the supervisor link (ARCHITECTURE §3).

The supervisor hands each child a connected socket on ``CLANKIE_SUPERVISOR_FD``.
The host says hello (role ``child``), then ``ready`` once its socket is
open, then a ``heartbeat`` every ``heartbeat_seconds`` carrying its health
report, and ``stopping`` on the way out. From the supervisor it accepts
``shutdown`` (sets the stop event); a host has no lanes, so ``abort_run``
answers ``aborted=False`` and ``lanes`` is empty. Losing the link means the
supervisor is gone: the host stops too rather than run unsupervised.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from typing import Any

from clankie import ipc
from clankie.clock import Clock
from clankie.errors import ChannelBroken, ChannelClosed, RemoteError
from clankie.protocol import AbortReply, Empty, Heartbeat, LanesReply, Record, Stopping

log = logging.getLogger(__name__)

Payload = Callable[[], tuple[str, dict[str, Any]]]


class SupervisorLink:
    """Sends ready/heartbeat/stopping; turns ``shutdown`` or link loss into the stop event."""

    def __init__(self, clock: Clock, interval: float, stop: asyncio.Event) -> None:
        self.clock = clock
        self.interval = interval
        self.stop = stop
        self.conn: ipc.Connection | None = None
        self._beats: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None
        self.seq = 0

    @classmethod
    async def open(cls, fd: int, clock: Clock, interval: float, stop: asyncio.Event) -> SupervisorLink:
        link = cls(clock, interval, stop)
        sock = socket.socket(fileno=fd)
        sock.setblocking(False)
        link.conn = await ipc.from_socket(sock, "child", link.handler, initiate=True)
        link._watch = asyncio.get_running_loop().create_task(link._watch_link())
        return link

    async def handler(self, conn: ipc.Connection, method: str, params: Record) -> Record | None:
        if method == "shutdown":
            log.info("supervisor asked us to shut down")
            self.stop.set()
            return None
        if method == "abort_run":
            return AbortReply(aborted=False)
        if method == "lanes":
            return LanesReply()
        raise RemoteError("method_not_found", f"a host does not serve {method}")

    async def ready(self, payload: Payload) -> None:
        await self._send("ready", Empty())
        self._beats = asyncio.get_running_loop().create_task(self._heartbeats(payload))

    async def stopping(self, reason: str) -> None:
        await self._send("stopping", Stopping(reason=reason[:200]))

    async def _send(self, method: str, record: Record) -> None:
        if self.conn is None or self.conn.closed:
            return
        with contextlib.suppress(ChannelBroken, ChannelClosed):
            await self.conn.notify(method, record)

    async def _heartbeats(self, payload: Payload) -> None:
        while True:
            detail, report = payload()
            self.seq += 1
            await self._send("heartbeat", Heartbeat(seq=self.seq, detail=detail, report=report))
            await self.clock.sleep(self.interval)

    async def _watch_link(self) -> None:
        assert self.conn is not None
        await self.conn.wait_closed()
        if not self.stop.is_set():
            log.warning("supervisor link lost; stopping")
            self.stop.set()

    async def close(self) -> None:
        for task in (self._beats, self._watch):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if self.conn is not None:
            await self.conn.aclose()
