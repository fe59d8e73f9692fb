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

A warm spare (:mod:`clankie.handover`) enters the link before it has
settings, calls ``await link.activation()`` (it says ``parked`` and waits
for the supervisor's ``activate``; a cold start returns at once) and then
:meth:`Link.attach` es its handler, heartbeat report and interval::

    async with supervisor_link("service", env=env) as link:
        if not await link.activation():
            return 0                      # stopped while parked
        settings = load(env)              # read once, for this life
        link.attach(handler, report, settings.heartbeat_seconds)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable, Mapping

import psutil

from clankie import ipc
from clankie.child import SUPERVISOR_FD_ENV, exit_if_orphaned
from clankie.clock import Clock, SystemClock
from clankie.directories import discord_attachment_root
from clankie.errors import ChannelBroken, ChannelClosed, RemoteError
from clankie.handover import is_spare
from clankie.metrics import METER
from clankie.paths import process_environment
from clankie.peers import HANDED
from clankie.protocol import Code, Empty, Heartbeat, Peers, ProcessSample, Record, Stopping
from clankie.router import Router
from clankie.waits import set_within

log = logging.getLogger(__name__)

HeartbeatReport = Callable[[], Heartbeat]

LINK_ROLE = "child"
# what the supervisor asks of a child that the child itself answers (the link answers shutdown/activate)
CHILD_METHODS = frozenset({"abort_run", "lanes", "say", "budget", "probe_artifact", "resolve_artifact"})


def link_fd(env: Mapping[str, str] | None = None) -> int | None:
    """The inherited link fd, or None when not started by a supervisor."""
    raw = (process_environment() if env is None else env).get(SUPERVISOR_FD_ENV, "")
    return int(raw) if raw.isdigit() else None


def heartbeat_interval(env: Mapping[str, str] | None = None) -> float:
    """The interval the supervisor asked for (``CLANKIE_HEARTBEAT_SECONDS``), for beats before settings exist."""
    raw = (process_environment() if env is None else env).get("CLANKIE_HEARTBEAT_SECONDS", "")
    try:
        value = float(raw)
    except ValueError:
        return 2.0
    return value if value > 0 else 2.0


def _default_report() -> Heartbeat:
    return Heartbeat()


def _spare_report() -> Heartbeat:
    return Heartbeat(detail="spare: parked")


class SelfMeasure:
    """This process measured by itself for its heartbeats (a non-dumpable child's ``/proc`` is closed to others)."""

    def __init__(self) -> None:
        self._ps = psutil.Process()
        self._ps.cpu_percent(None)  # the first reading starts the interval

    def __call__(self) -> ProcessSample:
        try:
            with self._ps.oneshot():
                return ProcessSample(rss_bytes=self._ps.memory_info().rss, num_fds=self._ps.num_fds(),
                                     cpu_percent=self._ps.cpu_percent(None), threads=self._ps.num_threads())
        except (psutil.Error, OSError):  # a /proc that went away (hidepid, a dying process): no figures, still a beat
            return ProcessSample()


class Link:
    """A live (or absent) link to the supervisor."""

    def __init__(
        self,
        name: str,
        conn: ipc.Connection | None,
        *,
        handler: ipc.Handler | None = None,
        report: HeartbeatReport | None = None,
        interval: float = 2.0,
        spare: bool = False,
    ) -> None:
        self.name = name
        self.conn = conn
        self.handler = handler
        self.report: HeartbeatReport = report or _default_report
        self.interval = interval
        self.spare = spare and conn is not None
        self.shutdown = asyncio.Event()
        self.shutdown_reason = ""
        self.activated = asyncio.Event()
        self.seq = 0
        self.said_stopping = False
        self._beat_now = asyncio.Event()
        self._measure = SelfMeasure()

    async def _pause(self, clock: Clock) -> None:
        """Sleep one interval on ``clock``; :meth:`attach` cuts it short so the new interval applies now."""
        self._beat_now.clear()
        await set_within(self._beat_now, clock, self.interval)

    def attach(self, handler: ipc.Handler | None, report: HeartbeatReport | None, interval: float) -> None:
        """This life's request handler, heartbeat report and interval (after :meth:`activation`)."""
        self.handler = handler
        self.report = report or _default_report
        self.interval = interval
        self._beat_now.set()

    async def activation(self) -> bool:
        """A spare says ``parked`` and waits for ``activate``; False if told to stop first. Cold: True at once."""
        if not self.spare:
            return True
        own, self.report = self.report, _spare_report
        await self._notify("parked", Empty())
        stop = asyncio.ensure_future(self.shutdown.wait())
        go = asyncio.ensure_future(self.activated.wait())
        try:
            await asyncio.wait({stop, go}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            go.cancel()
        self.report = own
        return self.activated.is_set() and not self.shutdown.is_set()

    @property
    def connected(self) -> bool:
        return self.conn is not None and not self.conn.closed

    async def ready(self) -> None:
        """Tell the supervisor this child is serving, its figures first.

        A beat goes ahead of ``ready`` on the same ordered link, so a child the supervisor counts as running has
        always measured itself once in this life (``clankiectl status`` shows its memory and fds from the start). The
        loop's own first beat is no promise of that: it is only scheduled when the link opens, and a spare's was the
        parked process's, which the supervisor does not keep for the child it becomes.
        """
        await self.beat()
        await self._notify("ready", Empty())

    async def stopping(self, reason: str = "") -> None:
        """Tell the supervisor this child is on its way out, once (sent on exit unless said before)."""
        if self.said_stopping:
            return
        self.said_stopping = True
        await self._notify("stopping", Stopping(reason=reason[:200]))

    async def beat(self) -> None:
        """Send one heartbeat now with this life's report, this process's own figures and its metrics (the loop does
        this every interval, :meth:`ready` once more). A report that fails is logged and costs that beat, never the
        caller."""
        if not self.connected:
            return
        try:
            report = self.report()  # first: a report sets gauges (lanes live, budgets) the metrics below carry
            self.seq += 1
            update = {"seq": self.seq, "process": self._measure(), "metrics": METER.report()}
            await self._notify("heartbeat", report.model_copy(update=update))
        except Exception:
            log.exception("heartbeat report failed")

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


@contextlib.asynccontextmanager
async def supervisor_link(
    name: str,
    handler: ipc.Handler | None = None,
    report: HeartbeatReport | None = None,
    *,
    clock: Clock | None = None,
    interval: float | None = None,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[Link]:
    """Connect to the supervisor (if any), heartbeat while inside, say ``stopping`` on exit."""
    fd = link_fd(env)
    every = interval if interval is not None else heartbeat_interval(env)
    if fd is None:
        yield Link(name, None, handler=handler, report=report, interval=every)
        return
    clock = clock or SystemClock()
    link_box: list[Link] = []

    def on_shutdown(params: Stopping) -> None:
        link_box[0].request_shutdown(params.reason or "supervisor asked")

    def on_activate(params: Empty) -> None:
        link_box[0].activated.set()

    def on_peers(params: Peers) -> None:
        HANDED.allow(params.pids)

    HANDED.expect()  # a supervisor names who may dial our socket: nobody until it does (clankie.peers)
    own = Router(LINK_ROLE, {"shutdown": on_shutdown, "activate": on_activate, "peers": on_peers},
                 unserved=CHILD_METHODS)

    async def on_request(conn: ipc.Connection, method: str, params: Record) -> Record | None:
        link = link_box[0]
        if method in own.methods:  # the link's own; the rest is the child's handler's
            return await own(conn, method, params)
        if link.handler is None:
            raise RemoteError(Code.METHOD_NOT_FOUND, f"{name} serves no {method}")
        return await link.handler(conn, method, params)

    sock = socket.socket(fileno=fd)
    root = str(discord_attachment_root(env))  # the child's own reading, reported in its hello
    conn = await ipc.from_socket(sock, LINK_ROLE, on_request, initiate=True, attachment_root=root)
    link = Link(name, conn, handler=handler, report=report, interval=every, spare=is_spare(env))
    link_box.append(link)

    async def beat_loop() -> None:
        while not conn.closed:
            await link.beat()
            await link._pause(clock)

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
