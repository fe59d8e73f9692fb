"""A child's warm spare: a process that has imported its modules and waits, parked, to become the child.

Mechanism (``docs/supervision.md`` says why this and not a fork server):
the spare is spawned by the same :func:`supervisor.spawn.spawn` as a cold
start, with ``CLANKIE_SPARE=1``. It arms parent death, imports what its
role needs, connects its link, says ``parked`` and waits. When the child's
next start comes (a crash, a kill, an operator restart) the slot hands its
:class:`~supervisor.spawn.Proc` to the child, which sends ``activate``: the
spare reads its settings, opens its state and serves the socket it
inherited, then says ``ready`` like any cold start. From the moment it is
taken it *is* the child: same pidfd, process group, output captures and
link, so reaping, PDEATHSIG, heartbeats, the stall watchdog and
``clankiectl status`` see nothing special.

A new spare is prepared in the background ``delay`` seconds after the child
is ready again (so its imports do not compete with the first turns), and
only once the whole tree has been ready. The decisions are the pure
:class:`supervisor.sparelife.SpareLife`; this is its shell.
"""

from __future__ import annotations

import asyncio
import errno as errno_mod
import functools
import logging
import signal
from collections.abc import Callable
from typing import assert_never

from clankie import ipc
from clankie.protocol import Empty, Heartbeat
from clankie.router import Router, ignore
from clankie.waits import within
from supervisor.lifecycle import Exit, State, describe
from supervisor.owner import SpareOwner
from supervisor.sparelife import SpareAction, SpareEvent, SpareLife, SpareState
from supervisor.spawn import Proc
from supervisor.watchdog import Liveness

log = logging.getLogger(__name__)

DROP_GRACE = 2.0
"""Seconds a dropped spare gets after SIGTERM before SIGKILL (it holds nothing yet)."""


class Spare:
    """The spare slot of one child (at most one spare, plus any dropped ones still dying)."""

    def __init__(self, child: SpareOwner, *, rand: Callable[[], float] | None = None) -> None:
        self.child: SpareOwner = child
        self.life = SpareLife(rand=rand)
        self.proc: Proc | None = None
        self.dying: set[Proc] = set()
        self._none_dying = asyncio.Event()
        self._none_dying.set()
        self.liveness = Liveness(child.liveness.timeout, first=child.liveness.first)
        self._timer: asyncio.Task[None] | None = None  # feeds WARM (after the want's delay) or DUE (a backoff's end)
        self._handed: Proc | None = None  # the process HAND_OVER took from the slot, for take() to return

    @property
    def enabled(self) -> bool:
        return self.child.spec.spare and self.child.tree.handover

    def procs(self) -> list[tuple[Proc, Callable[[Exit], None]]]:
        """Every live process of this slot with the callback its exit goes to (for the reaper)."""
        out: list[tuple[Proc, Callable[[Exit], None]]] = []
        if self.proc is not None:
            out.append((self.proc, self.exited))
        for proc in self.dying:
            out.append((proc, functools.partial(self._reaped_dying_status, proc)))
        return out

    # ------------------------------------------------------------ preparing

    def want(self, delay: float) -> None:
        """The child is running: have a spare parked ``delay`` seconds from now (no-op if one is there)."""
        if self.enabled and not self.child.tree.stopping:
            self._feed(SpareEvent.WANT, delay=delay)

    def _feed(self, event: SpareEvent, *, how: str = "", delay: float = 0.0) -> None:
        """Hand one event to the slot and do what it answers: the only caller of :meth:`SpareLife.handle`."""
        now = self.child.clock.monotonic()
        for action in self.life.handle(event, now, how=how):
            self._obey(action, now, delay)

    def _obey(self, action: SpareAction, now: float, delay: float) -> None:
        """``delay``: a want's, for ARM."""
        match action:
            case SpareAction.ARM:
                self._start_timer(delay, SpareEvent.WARM)
            case SpareAction.SCHEDULE:
                if self.life.next_start_at is not None:
                    self._start_timer(max(0.0, self.life.next_start_at - now), SpareEvent.DUE)
            case SpareAction.SPAWN:
                self._spawn(now)
            case SpareAction.REPORT:
                log.info("%s spare pid=%s is parked", self.child.name, self.proc.pid if self.proc else None)
                self.child.tree.changed()
            case SpareAction.HAND_OVER:
                self._handed, self.proc = self.proc, None
                self.liveness.disarm()
            case SpareAction.UNSCHEDULE:
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
            case SpareAction.TERMINATE:
                self._terminate()
            case _:
                assert_never(action)

    def _start_timer(self, delay: float, event: SpareEvent) -> None:
        """Feed ``event`` after ``delay`` s while the child still runs (one timer at a time)."""
        if self._timer is None:
            self._timer = self.child.tree.spawn(self._after(delay, event), name=f"spare-{self.child.name}")

    async def _after(self, delay: float, event: SpareEvent) -> None:
        await self.child.clock.sleep(delay)
        self._timer = None
        tree = self.child.tree
        if tree.stopping or not self.enabled or self.child.life.state is not State.RUNNING:
            return
        self._feed(event)

    def _spawn(self, now: float) -> None:
        try:
            self.proc = self.child.spawn_proc(self._on_link, spare=True)
        except OSError as exc:
            name = errno_mod.errorcode.get(exc.errno or 0, str(exc.errno))
            log.warning("cannot spawn a spare for %s: %s", self.child.name, name)
            self._feed(SpareEvent.EXIT, how=f"spawn_error {name}")
            return
        self.liveness.arm(now)
        log.info("warming a spare for %s: pid=%d", self.child.name, self.proc.pid)
        self.child.tree.changed()

    @functools.cached_property
    def _on_link(self) -> Router:
        """A warming spare says ``parked`` and heartbeats; the rest waits until it is the child."""
        return Router("supervisor", {"parked": self._parked, "heartbeat": self._beat,
                                     "ready": ignore, "stopping": ignore})

    def _beat(self, conn: ipc.Connection, params: Heartbeat) -> None:
        if self.proc is not None and conn is self.proc.link:
            self.liveness.beat(self.child.clock.monotonic())

    def _parked(self, conn: ipc.Connection, params: Empty) -> None:
        if self.proc is None or conn is not self.proc.link:
            return
        self.liveness.beat(self.child.clock.monotonic())
        self._feed(SpareEvent.PARKED)

    # ------------------------------------------------------------ taking

    def take(self) -> Proc | None:
        """The parked spare's process, now the child's; None when there is none (start cold)."""
        if self.proc is None or self.proc.link is None or self.proc.link.closed:
            return None
        self._feed(SpareEvent.TAKE)
        proc, self._handed = self._handed, None
        return proc

    # ------------------------------------------------------------ dying

    def exited(self, status: Exit) -> None:
        """The reaper's word that the (untaken) spare died: release it and back off before the next."""
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.release(self.child.tree.spawn, f"{self.child.name}-spare")
        self.liveness.disarm()
        log.warning("%s spare pid=%s died: %s", self.child.name, proc.pid if proc else None, describe(status))
        self._feed(SpareEvent.EXIT, how=describe(status))
        self.child.tree.changed()

    def _reaped_dying_status(self, proc: Proc, status: Exit) -> None:
        self._reaped_dying(proc)

    def _reaped_dying(self, proc: Proc) -> None:
        self.dying.discard(proc)
        if not self.dying:
            self._none_dying.set()
        proc.release(self.child.tree.spawn, f"{self.child.name}-spare")

    def tick(self, now: float) -> None:
        """A parked or warming spare that stopped heartbeating is killed (and replaced after its backoff)."""
        if self.proc is not None and self.liveness.expired(now):
            log.warning("%s spare pid=%d stopped heartbeating; killing it", self.child.name, self.proc.pid)
            self.liveness.disarm()
            self.proc.signal_group(signal.SIGKILL)

    def drop(self) -> None:
        """No spare wanted any more (the child stops, goes fatal, or the tree shuts down)."""
        self._feed(SpareEvent.DROP)

    def _terminate(self) -> None:
        """A dropped spare is asked to go (SIGTERM, SIGKILL after :data:`DROP_GRACE`) and reaped as dying."""
        self.liveness.disarm()
        if self.proc is not None:
            proc, self.proc = self.proc, None
            self.dying.add(proc)
            self._none_dying.clear()
            proc.signal_group(signal.SIGTERM)
            proc.signal_group(signal.SIGCONT)
            self.child.tree.spawn(self._kill_after(proc), name=f"spare-drop-{self.child.name}")

    async def _kill_after(self, proc: Proc) -> None:
        await asyncio.sleep(DROP_GRACE)  # real time: the process has to die in it
        if proc.pid is not None:
            proc.signal_group(signal.SIGKILL)

    async def wait_gone(self, timeout: float) -> None:
        """Until every dropped spare has been reaped (bounded)."""
        try:
            await within(self._none_dying.wait(), timeout)
        except TimeoutError:
            log.warning("%s: %d dropped spares did not exit in %.1fs", self.child.name, len(self.dying), timeout)

    # ------------------------------------------------------------ status

    def status(self) -> tuple[str, int | None]:
        """(one phrase for ``clankiectl status``, the spare's pid)."""
        if not self.enabled:
            return "off", None
        st = self.life.state
        pid = self.proc.pid if self.proc is not None else None
        if st is SpareState.PARKED:
            return f"parked pid {pid}", pid
        if st is SpareState.WARMING:
            return f"warming pid {pid}", pid
        if st is SpareState.BACKOFF:
            return f"backoff ({self.life.reason})", None
        return ("none yet" if self.life.spawned == 0 else "taken; next once the child is ready"), None
