"""The child lifecycle: a pure, table-driven state machine.

No I/O and no clock: every event carries ``now`` (monotonic seconds). The
shell (:mod:`supervisor.process`) feeds events in and acts on the resulting
state: spawn in STARTING, signal in STOPPING, schedule a start at
``next_start_at`` in BACKOFF or FATAL.

Restart policy, applied to **every** unrequested exit (before or after
RUNNING): a child that had been ready for ``stable_after`` seconds (or up
for ``reset_after``) when it died is restarted at once and its backoff
starts over; only crashes in a row (lives that never got that far) wait a
full-jitter backoff (:class:`clankie.backoff.Backoff`). ``reason`` says
which, and how many crashes in a row it is. A restart intensity: more than ``intensity`` unrequested exits within
``window`` seconds makes the child FATAL, with ``next_start_at`` one
``fatal_cooldown`` later and the reason kept. Exit status 78 (EX_CONFIG)
makes it FATAL with no automatic restart: the operator fixes the
configuration and runs ``clankiectl start``.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from clankie.backoff import Backoff
from clankie.errors import EX_CONFIG


class State(enum.Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    BACKOFF = "backoff"
    STOPPING = "stopping"
    EXITED = "exited"
    FATAL = "fatal"


class Event(enum.Enum):
    START = "start"  # operator or boot asks for the child, or its backoff/cooldown ran out
    SPAWN_FAILED = "spawn_failed"  # exec failed (ENOENT, EACCES ...)
    READY = "ready"  # the child said `ready` on its link
    STOP = "stop"  # operator or shutdown asks it to go
    KILL = "kill"  # the supervisor kills it to restart it (heartbeat, stall watchdog, restart)
    EXIT = "exit"  # its process ended
    REPOLICY = "repolicy"  # internal: EXITED resolves to BACKOFF or FATAL


class LifecycleError(Exception):
    """Raised for an event the current state does not accept (a bug in the shell)."""


_ = State
TRANSITIONS: dict[tuple[State, Event], State] = {
    (_.STOPPED, Event.START): _.STARTING,
    (_.EXITED, Event.START): _.STARTING,
    (_.BACKOFF, Event.START): _.STARTING,
    (_.FATAL, Event.START): _.STARTING,
    (_.STARTING, Event.READY): _.RUNNING,
    (_.STARTING, Event.SPAWN_FAILED): _.EXITED,
    (_.STARTING, Event.EXIT): _.EXITED,
    (_.RUNNING, Event.EXIT): _.EXITED,
    (_.STARTING, Event.STOP): _.STOPPING,
    (_.RUNNING, Event.STOP): _.STOPPING,
    (_.STARTING, Event.KILL): _.STOPPING,
    (_.RUNNING, Event.KILL): _.STOPPING,
    (_.STOPPING, Event.STOP): _.STOPPING,
    (_.STOPPING, Event.KILL): _.STOPPING,
    (_.STOPPING, Event.EXIT): _.STOPPED,  # or STARTING/EXITED when a restart was asked (see exit())
    (_.BACKOFF, Event.STOP): _.STOPPED,
    (_.FATAL, Event.STOP): _.STOPPED,
    (_.STOPPED, Event.STOP): _.STOPPED,
    (_.EXITED, Event.STOP): _.STOPPED,
    (_.EXITED, Event.REPOLICY): _.BACKOFF,  # or FATAL (see _after_exit())
}
"""Every legal (state, event) pair and where it leads; anything else is a bug."""


@dataclass(frozen=True, slots=True)
class Policy:
    """Restart policy for one child."""

    backoff_base: float = 0.5
    backoff_cap: float = 30.0
    reset_after: float = 60.0  # up this long (ready or not): the next crash restarts at once
    stable_after: float = 10.0  # ready this long: the next crash restarts at once
    intensity: int = 10
    window: float = 60.0
    fatal_cooldown: float = 300.0


@dataclass(frozen=True, slots=True)
class Exit:
    """How one process ended."""

    code: int | None
    signal: int | None
    at: float
    core: bool = False
    requested: bool = False  # we were stopping it
    message: str = ""  # the child's last stderr line (shown for EX_CONFIG)

    @property
    def clean(self) -> bool:
        return self.code == 0


@dataclass
class Lifecycle:
    """One child's lifecycle state plus the bookkeeping ``status`` shows."""

    policy: Policy = field(default_factory=Policy)
    rand: Callable[[], float] | None = None
    state: State = State.STOPPED
    restarts: int = 0
    started_at: float | None = None
    ready_at: float | None = None
    last_exit: Exit | None = None
    next_start_at: float | None = None
    reason: str = ""  # why it is in this state (backoff cause, fatal cause, kill cause)
    ended: str = ""  # how the last process ended: "exited 0", "killed by SIGKILL", "killed after grace"
    delays: list[float] = field(default_factory=list)  # every backoff delay given, for status and tests
    streak: int = 0  # crashes in a row: lives that ended before they were stable
    waiting: str = ""  # why the restart waits (or does not): shown with the reason in status
    restart_now: bool = False  # set when an operator restart's exit landed: the shell starts it again
    _restart_after_exit: bool = False
    _kill_reason: str = ""
    _deaths: deque[float] = field(default_factory=deque)
    _backoff: Backoff = field(init=False)

    def __post_init__(self) -> None:
        kw = {"rand": self.rand} if self.rand is not None else {}
        self._backoff = Backoff(self.policy.backoff_base, self.policy.backoff_cap, self.policy.reset_after, **kw)

    # ------------------------------------------------------------ events

    def _go(self, event: Event) -> State:
        target = TRANSITIONS.get((self.state, event))
        if target is None:
            raise LifecycleError(f"{event.value} is not valid in state {self.state.value}")
        self.state = target
        return target

    def start(self, now: float) -> State:
        """Ask for a (re)start; the shell then spawns."""
        if self.state in (State.STARTING, State.RUNNING, State.STOPPING):
            return self.state  # already up or on its way; a start is idempotent
        if self.state in (State.EXITED, State.BACKOFF, State.FATAL, State.STOPPED) and self.started_at is not None:
            self.restarts += 1
        self._go(Event.START)
        self.started_at = now
        self.ready_at = None
        self.next_start_at = None
        self.waiting = ""
        self._restart_after_exit = False
        self._kill_reason = ""
        self.restart_now = False
        return self.state

    def ready(self, now: float) -> State:
        if self.state is not State.STARTING:
            return self.state  # a late `ready` after a kill began changes nothing
        self._go(Event.READY)
        self.ready_at = now
        self.reason = ""
        return self.state

    def stop(self) -> State:
        """Operator or shutdown stop: no restart afterwards."""
        self._restart_after_exit = False
        if self.state in (State.BACKOFF, State.FATAL, State.EXITED):
            self.next_start_at = None
        return self._go(Event.STOP)

    def kill(self, reason: str, *, restart: bool = True, counts_as_crash: bool = True) -> State:
        """The supervisor takes the child down to restart it (``reason``: heartbeat, stalled, restart)."""
        if self.state not in (State.STARTING, State.RUNNING, State.STOPPING):
            return self.state
        self._go(Event.KILL)
        self._restart_after_exit = restart
        self._kill_reason = reason if counts_as_crash else ""
        self.reason = reason
        return self.state

    def spawn_failed(self, now: float, errno_name: str) -> State:
        self._go(Event.SPAWN_FAILED)
        self.last_exit = Exit(code=None, signal=None, at=now)
        self.ended = f"spawn_error {errno_name}"
        return self._after_exit(now, f"spawn_error {errno_name}")

    def exit(self, ex: Exit, now: float) -> State:
        """The process ended; decide what comes next."""
        self.last_exit = ex
        self.ended = describe(ex)
        if self.state is State.STOPPING:
            restart, cause = self._restart_after_exit, self._kill_reason
            self._go(Event.EXIT)
            if not restart:
                self.reason = "stopped"
                return self.state
            if not cause:  # an operator restart: straight back up, no backoff
                self.reason = "restart"
                self.restart_now = True
                return self.state
            self.state = State.EXITED
            return self._after_exit(now, cause)
        self._go(Event.EXIT)
        if ex.code == EX_CONFIG:
            self.state = State.FATAL
            self.next_start_at = None
            self.reason = "config_error: " + (ex.message or "the child reported a configuration error")
            return self.state
        return self._after_exit(now, "crashed: " + self.ended)

    def _after_exit(self, now: float, cause: str) -> State:
        """EXITED → BACKOFF, or FATAL when the restart intensity is exceeded."""
        self._deaths.append(now)
        while self._deaths and now - self._deaths[0] > self.policy.window:
            self._deaths.popleft()
        stable = self.stable(now)
        if stable:
            self._backoff.reset()  # stable uptime wipes the slate
            self.streak = 0
        self.streak += 1
        self._go(Event.REPOLICY)
        if len(self._deaths) > self.policy.intensity:
            self.state = State.FATAL
            self.next_start_at = now + self.policy.fatal_cooldown
            self.reason = f"restart intensity: {len(self._deaths)} exits in {self.policy.window:g}s; last {cause}"
            self._deaths.clear()
            self._backoff.reset()
            return self.state
        delay = 0.0 if stable else self._backoff.delay(now)  # the first crash after a stable run: at once
        self.delays.append(delay)
        self.next_start_at = now + delay
        self.reason = cause
        if stable:
            self.waiting = "it had been stable: restarted at once"
        else:
            self.waiting = f"{self.streak} crashes in a row: backoff {delay:.1f}s"
        return self.state

    def stable(self, now: float) -> bool:
        """Ready for ``stable_after`` or up for ``reset_after``: a crash now is not one of a row."""
        p = self.policy
        ready_long = self.ready_at is not None and now - self.ready_at >= p.stable_after
        up_long = self.started_at is not None and now - self.started_at >= p.reset_after
        return ready_long or up_long

    # ------------------------------------------------------------ queries

    def due(self, now: float) -> bool:
        """True when a BACKOFF or FATAL cooldown has run out."""
        return self.state in (State.BACKOFF, State.FATAL) and self.next_start_at is not None and now >= self.next_start_at

    def uptime(self, now: float) -> float | None:
        if self.state in (State.STARTING, State.RUNNING, State.STOPPING) and self.started_at is not None:
            return max(0.0, now - self.started_at)
        return None


def describe(ex: Exit) -> str:
    """A short phrase for how a process ended."""
    import signal as _signal

    if ex.signal is not None:
        try:
            name = _signal.Signals(ex.signal).name
        except ValueError:
            name = f"signal {ex.signal}"
        how = f"killed by {name}" + (" (core dumped)" if ex.core else "")
        if ex.requested and ex.signal == _signal.SIGKILL:
            return "killed after grace"
        return how
    return f"exited {ex.code}"


# ---------------------------------------------------------------- the warm spare


class SpareState(enum.Enum):
    OFF = "off"  # none wanted: handover off, the child not running, or stopping
    WARMING = "warming"  # spawned, importing its modules
    PARKED = "parked"  # imported and waiting on its link: the next start takes it
    BACKOFF = "backoff"  # the last spare died before it was taken; another at next_start_at


class SpareEvent(enum.Enum):
    WANT = "want"  # the child is running: prepare the next spare
    PARKED = "parked"  # the spare said `parked` on its link
    TAKE = "take"  # it becomes the child
    EXIT = "exit"  # it died (or was killed) before it was taken
    DUE = "due"  # its backoff ran out
    DROP = "drop"  # no spare wanted any more (stop, shutdown)


_S = SpareState
SPARE_TRANSITIONS: dict[tuple[SpareState, SpareEvent], SpareState] = {
    (_S.OFF, SpareEvent.WANT): _S.WARMING,
    (_S.WARMING, SpareEvent.WANT): _S.WARMING,
    (_S.PARKED, SpareEvent.WANT): _S.PARKED,
    (_S.BACKOFF, SpareEvent.WANT): _S.BACKOFF,  # it comes when the backoff ends
    (_S.WARMING, SpareEvent.PARKED): _S.PARKED,
    (_S.PARKED, SpareEvent.TAKE): _S.OFF,
    (_S.WARMING, SpareEvent.EXIT): _S.BACKOFF,
    (_S.PARKED, SpareEvent.EXIT): _S.BACKOFF,
    (_S.BACKOFF, SpareEvent.DUE): _S.WARMING,
    (_S.OFF, SpareEvent.DROP): _S.OFF,
    (_S.WARMING, SpareEvent.DROP): _S.OFF,
    (_S.PARKED, SpareEvent.DROP): _S.OFF,
    (_S.BACKOFF, SpareEvent.DROP): _S.OFF,
}
"""Every legal (state, event) pair of a child's spare slot; anything else is a bug."""


@dataclass
class SpareLife:
    """One child's spare slot: whether a spare exists, and when the next one is due after a death.

    A spare that dies before it is taken (an import error, a kill for missing
    heartbeats) is replaced after a full-jitter backoff, capped at a minute,
    that starts over once a spare parks; the child itself never waits for a
    spare: without one, its next start is cold.
    """

    base: float = 0.5
    cap: float = 60.0
    rand: Callable[[], float] | None = None
    state: SpareState = SpareState.OFF
    next_start_at: float | None = None
    reason: str = ""
    spawned: int = 0  # spares started
    taken: int = 0  # spares that became the child
    _backoff: Backoff = field(init=False)

    def __post_init__(self) -> None:
        kw = {"rand": self.rand} if self.rand is not None else {}
        self._backoff = Backoff(self.base, self.cap, reset_after=float("inf"), **kw)

    def _go(self, event: SpareEvent) -> SpareState:
        target = SPARE_TRANSITIONS.get((self.state, event))
        if target is None:
            raise LifecycleError(f"spare {event.value} is not valid in state {self.state.value}")
        self.state = target
        return target

    def want(self) -> bool:
        """The child is running; True when the shell should spawn a spare now."""
        before = self.state
        self._go(SpareEvent.WANT)
        if before is SpareState.OFF:
            self.spawned += 1
            self.reason = ""
            return True
        return False

    def parked(self) -> SpareState:
        if self.state is not SpareState.WARMING:
            return self.state  # a late word from a spare already dropped changes nothing
        self._backoff.reset()
        return self._go(SpareEvent.PARKED)

    def take(self) -> bool:
        """True when a parked spare is there to become the child (and is now taken)."""
        if self.state is not SpareState.PARKED:
            return False
        self._go(SpareEvent.TAKE)
        self.taken += 1
        return True

    def exit(self, now: float, how: str) -> SpareState:
        """The spare died untaken: back off before the next one."""
        if self.state not in (SpareState.WARMING, SpareState.PARKED):
            return self.state  # dropped already: nothing more to do
        self._go(SpareEvent.EXIT)
        delay = self._backoff.delay(now)
        self.next_start_at = now + delay
        self.reason = f"spare {how}; next spare in {delay:.1f}s"
        return self.state

    def due(self, now: float) -> bool:
        """True (and WARMING) when a backoff ran out: the shell spawns a spare now."""
        if self.state is not SpareState.BACKOFF or self.next_start_at is None or now < self.next_start_at:
            return False
        self._go(SpareEvent.DUE)
        self.next_start_at = None
        self.spawned += 1
        return True

    def drop(self) -> SpareState:
        self.next_start_at = None
        return self._go(SpareEvent.DROP)
