"""The process tree: start, reap, watch, stop. One loop does all of it.

* One reaper (:meth:`Tree.reap`), woken by each child's pidfd and by SIGCHLD:
  it collects known children through their pidfds and, as a child
  subreaper, any adopted orphan through ``waitid(P_ALL)``; statuses of known
  pids are dispatched by pid, so none is ever lost.
* One supervising tick (``stall_tick_seconds``) re-reads the clocks, kills
  children whose heartbeats stopped, and runs the stall watchdog on the
  service's runs.
* ``WATCHDOG=1`` is sent from this same loop every half ``WATCHDOG_USEC``.
* Stop: reverse start order, SIGTERM (+SIGCONT) → grace → SIGKILL, within
  an overall stop budget; a second SIGTERM/SIGINT SIGKILLs everything left.
* With the hand-over on (``CLANKIE_HANDOVER``, the default) the tree binds
  every listening socket its children serve before any child starts, hands
  each child its own, and removes them last; children with ``spare`` in
  their spec keep a warm spare (:mod:`supervisor.spare`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import uuid
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from clankie import sockfile
from clankie.child import TREE_ID_ENV, become_subreaper
from clankie.clock import Clock
from clankie.errors import ChannelBroken, ChannelClosed, ConfigError, RemoteError, RequestTimeout
from clankie.journald import NATIVE_ENV
from clankie.logs import stderr_is_journal
from clankie.paths import child_log_dir, make_private_dirs, socket_path
from clankie.protocol import AbortReply, AbortRun
from clankie.settings import Settings
from clankie.tasks import TaskSet
from supervisor import statusline
from supervisor.environment import minimal
from supervisor.forward import StderrQueue
from supervisor.lifecycle import Exit, State
from supervisor.metrics import MetricsServer, registry_for
from supervisor.owner import SpareSlot
from supervisor.peers import Announcer
from supervisor.process import Child, exit_from_waitid
from supervisor.spawn import Proc
from supervisor.spec import ChildSpec
from supervisor.systemd import Notifier
from supervisor.treestate import STOP_BUDGET, TreeEvent, TreeState, move
from supervisor.watchdog import Abort, KillService

log = logging.getLogger(__name__)


BACKGROUND_PER_CHILD = 64
"""Background tasks per child (activations, shutdown notes, spare timers, stall aborts: a handful each at once)."""


class Tree:
    """The supervisor: owns every child and the loops that watch them."""

    def __init__(
        self,
        settings: Settings,
        specs: list[ChildSpec],
        *,
        clock: Clock,
        env: Mapping[str, str],
        notifier: Notifier | None = None,
        subreaper: bool = True,
        forward_fd: int | None = 2,
        stderr: StderrQueue | None = None,
        stop_budget: float = STOP_BUDGET,
        rand: Callable[[], float] | None = None,
        log_max_bytes: int | None = None,
        log_backups: int | None = None,
        spare_delay: float | None = None,
    ) -> None:
        self.settings = settings
        self.handover = settings.handover
        self.spare_delay = settings.spare_delay_seconds if spare_delay is None else spare_delay
        self.listeners: dict[str, socket.socket] = {}
        self.clock = clock
        self.notifier = notifier or Notifier({})
        self.subreaper = subreaper
        # children's lines (and, from app.py, our own log records) go to stderr through one
        # bounded queue that never blocks the loop; forward_fd=None turns forwarding off
        self.stderr = stderr if stderr is not None else (StderrQueue(forward_fd) if forward_fd is not None else None)
        self._own_stderr = stderr is None and self.stderr is not None
        self.stop_budget = stop_budget
        self.log_dir = make_private_dirs(child_log_dir(settings.state_dir))
        # child logs roll at the operator's size and count unless a test passes its own
        self.log_max_bytes = settings.child_log_rotate_bytes if log_max_bytes is None else log_max_bytes
        self.log_backups = settings.child_log_backups if log_backups is None else log_backups
        self.full_env = dict(env)  # read only for a spec's passthrough names
        self.child_env = minimal(env, settings)
        self.tree_id = uuid.uuid4().hex[:16]  # this run's name in every child's env: a crash seen vs the tree's end
        self.child_env[TREE_ID_ENV] = self.tree_id
        # under systemd the children write native journal entries with fields, and their stderr is not forwarded
        # (it would be in the journal twice); it still goes to their log files (clankie.journald)
        self.native_journal = forward_fd is not None and stderr_is_journal(env)
        if self.native_journal:
            self.child_env[NATIVE_ENV] = "1"
        self.started_at = clock.monotonic()
        self.state = TreeState.STARTING  # moved only by _move, through supervisor.treestate's table
        self.ready_sent = False
        self._stop_requested = asyncio.Event()
        self._forced = False
        self._status_line = ""
        self.peers = Announcer(self)
        self.children: dict[str, Child] = {}
        for spec in specs:
            self.children[spec.name] = Child(spec, self, heartbeat_timeout=settings.heartbeat_timeout_seconds, rand=rand)
        self.order = [s.name for s in specs]
        self._tasks: list[asyncio.Task[None]] = []
        self._background = TaskSet("supervisor background", BACKGROUND_PER_CHILD * max(1, len(specs)))
        self.adopted_reaped = 0
        self.watchdog_aborts = 0  # stalled runs sent abort_run (clankie_watchdog_aborts_total)
        self.metrics: MetricsServer | None = None

    # ------------------------------------------------------------ running

    async def run(self, until: asyncio.Event | None = None) -> None:
        """Start every child, supervise until asked to stop, then stop in reverse order."""
        loop = asyncio.get_running_loop()
        await self.bind_listeners()
        if self.settings.metrics_listen is not None:
            server = MetricsServer(self.settings.metrics_listen, registry_for(self),
                                   max_connections=self.settings.metrics_max_connections,
                                   header_seconds=self.settings.metrics_header_seconds)
            await server.start()  # an address it cannot take is a ConfigError (exit 78) before any child starts
            self.metrics = server
        if self.subreaper:
            become_subreaper()
            loop.add_signal_handler(signal.SIGCHLD, self.reap)
        self._tasks.append(loop.create_task(self._tick_loop(), name="supervise-tick"))
        interval = self.notifier.watchdog_interval()
        if interval is not None:
            self._tasks.append(loop.create_task(self._watchdog_loop(interval), name="sd-watchdog"))
        if self.stderr is not None:
            self.stderr.attach(loop)
        self._move(TreeEvent.RUN)
        for name in self.order:
            self.children[name].start()
        self.changed()
        waiters = [asyncio.ensure_future(self._stop_requested.wait())]
        if until is not None:
            waiters.append(asyncio.ensure_future(until.wait()))
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for w in waiters:
            w.cancel()
        await self.shutdown()

    async def bind_listeners(self) -> None:
        """Bind every socket the children serve (hand-over on): once, for the life of the tree."""
        if not self.handover:
            return
        for name in self.order:
            for sock_name in self.children[name].spec.sockets:
                if sock_name in self.listeners:
                    raise ConfigError(f"socket {sock_name!r} is served by two children")
                try:
                    path = socket_path(self.settings.runtime_dir, sock_name)
                except ValueError as exc:
                    raise ConfigError(f"child {name!r}: {exc}") from None
                self.listeners[sock_name] = await sockfile.bind_listener(path)
                log.info("holding %s for %s", path.name, name)

    def listeners_for(self, spec: ChildSpec) -> dict[str, socket.socket]:
        """The listening sockets handed to a process of ``spec`` (none with the hand-over off)."""
        return {n: self.listeners[n] for n in spec.sockets if n in self.listeners}

    def _close_listeners(self) -> None:
        for sock_name, sock in self.listeners.items():
            sock.close()
            with contextlib.suppress(FileNotFoundError, ValueError):
                socket_path(self.settings.runtime_dir, sock_name).unlink()
        self.listeners.clear()

    def want_spare(self, spare: SpareSlot) -> None:
        """A child is ready: prepare its next spare, once the whole tree has been ready."""
        if self.ready_sent:
            spare.want(self.spare_delay)

    def request_stop(self) -> None:
        """First SIGTERM/SIGINT: ordered stop. Second: SIGKILL whatever is left."""
        if self._stop_requested.is_set():
            self.force()
            return
        log.info("stop requested")
        self._stop_requested.set()

    def force(self) -> None:
        if self._forced:
            return
        self._forced = True
        log.warning("forced stop: killing every child now")
        for child in self.children.values():
            child.force()

    @property
    def stopping(self) -> bool:
        """The ordered stop has begun (or ended): nothing starts any more."""
        return self.state in (TreeState.STOPPING, TreeState.STOPPED)

    def _move(self, event: TreeEvent) -> None:
        self.state = move(self.state, event)

    async def shutdown(self) -> None:
        self._move(TreeEvent.STOP)
        self.notifier.stopping("stopping")
        deadline = self.clock.monotonic() + self.stop_budget
        for child in self.children.values():
            child.spare.drop()
        for name in reversed(self.order):
            child = self.children[name]
            remaining = max(0.1, deadline - self.clock.monotonic())
            grace = min(child.spec.stop_timeout, remaining)
            if self._forced:
                child.force()
            await child.stop(grace)
        for child in self.children.values():
            await child.spare.wait_gone(max(0.1, deadline - self.clock.monotonic()))
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._cancel_background()
        if self.subreaper:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_signal_handler(signal.SIGCHLD)
            self.reap()
        self._close_listeners()
        if self.metrics is not None:  # scraped to the end: the stop's restarts and exits are counted
            await self.metrics.close()
            self.metrics = None
        if self.stderr is not None:
            if self._own_stderr:
                self.stderr.close(timeout=1.0)
            else:
                self.stderr.detach()  # its owner drains it once the loop is gone
        self._move(TreeEvent.DONE)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` in the background, keeping a reference until it ends; shutdown cancels it.

        Raises :class:`~clankie.tasks.TaskSetFull` past :data:`BACKGROUND_PER_CHILD` tasks per child: each of
        these ends within a stop timeout, so that many at once is a leak, and a loud one.
        """
        return self._background.spawn(coro, name=name)

    async def _cancel_background(self) -> None:
        await self._background.aclose(timeout=1.0)

    # ------------------------------------------------------------ reaping

    def _procs(self) -> list[tuple[Proc, Callable[[Exit], None]]]:
        out: list[tuple[Proc, Callable[[Exit], None]]] = []
        for child in self.children.values():
            if child.proc is not None:
                out.append((child.proc, child.exited))
            out.extend(child.spare.procs())
        return out

    def reap(self) -> None:
        """The one reaper: collect every exited process (children, spares, adopted) and dispatch by pid."""
        procs = self._procs()
        by_pid = {proc.pid: (proc, done) for proc, done in procs if proc.pid is not None}
        for proc, done in procs:
            if proc.pidfd is None or proc.pid is None:
                continue
            try:
                res = os.waitid(os.P_PIDFD, proc.pidfd, os.WEXITED | os.WNOHANG)
            except ChildProcessError:
                res = None
            if res is not None and res.si_pid:
                done(exit_from_waitid(res))
        if not self.subreaper:
            return
        while True:
            try:
                res = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG)
            except ChildProcessError:
                return
            if res is None or not res.si_pid:
                return
            found = by_pid.get(res.si_pid)
            if found is not None and found[0].pid == res.si_pid:
                found[1](exit_from_waitid(res))
            else:
                self.adopted_reaped += 1
                log.debug("reaped adopted pid %d", res.si_pid)

    # ------------------------------------------------------------ watching

    async def _tick_loop(self) -> None:
        tick = self.settings.stall_tick_seconds
        while True:
            await self.clock.sleep(tick)
            self.tick()

    def tick(self) -> None:
        """One supervising pass: heartbeat liveness and the stall watchdog."""
        now = self.clock.monotonic()
        for child in self.children.values():
            child.spare.tick(now)
            if child.liveness.expired(now):  # armed from its spawn until it is asked to go or exits
                child.kill("heartbeat")
                continue
            if child.stall is not None and child.alive and child.life.state is State.RUNNING:
                for verdict in child.stall.tick(self.clock.boottime()):
                    if isinstance(verdict, KillService):
                        child.kill(f"stalled: {verdict.reason}")
                        break
                    if isinstance(verdict, Abort):
                        self.spawn(self._abort_stalled(child, verdict), name=f"abort-{verdict.run_id}")
        self.changed()

    async def _abort_stalled(self, child: Child, verdict: Abort) -> None:
        log.warning("run %s in lane %s stalled (%.0fs silent); aborting it", verdict.run_id, verdict.lane, verdict.age_s)
        self.watchdog_aborts += 1
        link = child.link
        if link is None or child.stall is None:
            return
        try:
            reply = await link.request(
                "abort_run",
                AbortRun(lane=verdict.lane, run_id=verdict.run_id, reason="stalled"),
                timeout=self.settings.stall_abort_grace_seconds,
            )
        except (RemoteError, ChannelBroken, ChannelClosed, RequestTimeout) as exc:
            log.warning("abort of run %s failed: %s", verdict.run_id, type(exc).__name__)
            return  # the grace timer in the watchdog decides
        if isinstance(reply, AbortReply) and child.stall is not None:
            child.stall.confirmed(verdict.run_id, reply.aborted)

    async def _watchdog_loop(self, interval: float) -> None:
        while True:
            self.notifier.watchdog()
            await asyncio.sleep(interval)

    # ------------------------------------------------------------ readiness and status

    def changed(self) -> None:
        """A child changed state: tell each child who may dial its socket; update READY=1 and STATUS= for systemd."""
        self.peers.announce(self.children.values())
        states = {c.name: c.life.state for c in self.children.values()}
        all_ready = all(s is State.RUNNING for s in states.values())
        line = self.status_line()
        if all_ready and not self.ready_sent and not self.stopping:
            self.ready_sent = True
            self.notifier.ready(line)
            self._status_line = line
            for child in self.children.values():  # now the spares: their imports did not slow the boot
                child.spare.want(self.spare_delay)
        elif line != self._status_line:
            self._status_line = line
            self.notifier.status(line)

    def disk_problem(self) -> str:
        """One line when the state filesystem is full or a child's log cannot be written, else ""."""
        return statusline.disk_problem(self.children.values(), self.settings.state_dir)

    def status_line(self) -> str:
        return statusline.status_line(self.children.values(), self.clock.monotonic(), self.disk_problem())

    def uptime(self) -> float:
        return self.clock.monotonic() - self.started_at

    def child(self, name: str) -> Child | None:
        return self.children.get(name)

