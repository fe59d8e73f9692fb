"""The child lifecycle: a pure, table-driven state machine.

No I/O and no clock: every event carries ``now`` (monotonic seconds). The
shell (:mod:`supervisor.process`) feeds every input through one entry
(``Child._feed``) and does what the returned :class:`Action` list says, and
nothing else: it never decides from the state.

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

Every start after the first is counted by why (``restarts_by``, :data:`RESTART_REASONS`): how the life
before it ended (``crash``, ``watchdog``, ``spawn_error``), or ``operator`` when an operator is why it starts.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from clankie.backoff import Backoff
from clankie.errors import EX_CONFIG, LocalProtocolError


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
    EXIT = "exit"  # its process ended (unasked; or, in STOPPING, after a stop or an operator restart)
    EXIT_CONFIG = "exit_config"  # derived: it ended unasked with status 78 (EX_CONFIG)
    EXIT_FAULT = "exit_fault"  # derived: it ended after a kill for a fault (heartbeat, stalled)
    REPOLICY = "repolicy"  # derived: EXITED resolves to BACKOFF under the restart intensity
    GIVE_UP = "give_up"  # derived: EXITED resolves to FATAL, the restart intensity exceeded


INPUTS = (Event.START, Event.SPAWN_FAILED, Event.READY, Event.STOP, Event.KILL, Event.EXIT)
"""The events the shell feeds to :meth:`Lifecycle.handle`; the rest are derived by the core from them."""


RESTART_REASONS = ("crash", "watchdog", "spawn_error", "operator")  # clankie_child_restarts_total{reason}
OPERATOR = "operator"  # the START reason of an operator's start or restart (a timer's START gives none)


class Action(enum.Enum):
    """What the shell does after an event, in the order returned."""

    UNSCHEDULE = "unschedule"  # forget the start scheduled at next_start_at (a start or a stop came first)
    SPAWN = "spawn"  # start a process (the parked spare or a cold spawn); an exec error is fed back as SPAWN_FAILED
    TERMINATE = "terminate"  # ask the live process to go (shutdown, SIGTERM; SIGKILL after grace)
    SCHEDULE = "schedule"  # feed START at next_start_at (BACKOFF, or FATAL with a cooldown)
    RESTART = "restart"  # feed START now (an operator restart's exit landed)
    WANT_SPARE = "want_spare"  # the child is ready: prepare its next spare
    DROP_SPARE = "drop_spare"  # no spare wanted: stopping, or it would only fail the same way


class LifecycleError(LocalProtocolError):
    """Raised when the shell feeds an event the current state does not accept: a bug on our side.

    Nothing moves: the state and the bookkeeping stay as they were.
    """


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
    (_.STARTING, Event.EXIT_CONFIG): _.FATAL,
    (_.RUNNING, Event.EXIT_CONFIG): _.FATAL,
    (_.STARTING, Event.STOP): _.STOPPING,
    (_.RUNNING, Event.STOP): _.STOPPING,
    (_.STARTING, Event.KILL): _.STOPPING,
    (_.RUNNING, Event.KILL): _.STOPPING,
    (_.STOPPING, Event.STOP): _.STOPPING,
    (_.STOPPING, Event.KILL): _.STOPPING,
    (_.STOPPING, Event.EXIT): _.STOPPED,  # a stop, or an operator restart (action RESTART)
    (_.STOPPING, Event.EXIT_FAULT): _.EXITED,
    (_.BACKOFF, Event.STOP): _.STOPPED,
    (_.FATAL, Event.STOP): _.STOPPED,
    (_.STOPPED, Event.STOP): _.STOPPED,
    (_.EXITED, Event.STOP): _.STOPPED,
    (_.EXITED, Event.REPOLICY): _.BACKOFF,
    (_.EXITED, Event.GIVE_UP): _.FATAL,
}
"""Every legal (state, event) pair and where it leads; every state change is one of these rows."""

IGNORED: frozenset[tuple[State, Event]] = frozenset(
    {(s, Event.START) for s in (_.STARTING, _.RUNNING, _.STOPPING)}  # already up or on its way
    | {(s, Event.READY) for s in State if s is not _.STARTING}  # a late `ready` after a kill began
    | {(s, Event.KILL) for s in (_.STOPPED, _.EXITED, _.BACKOFF, _.FATAL)}  # nothing to kill
)
"""Input pairs that change nothing (no move, no action) rather than raise."""


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
    requested: bool = False  # we were stopping it (set by the core from its own state, whatever the shell passed)
    message: str = ""  # the child's last stderr line (shown for EX_CONFIG)

    @property
    def clean(self) -> bool:
        return self.code == 0


Move = tuple[State, Event, State]


@dataclass
class Lifecycle:
    """One child's lifecycle state plus the bookkeeping ``status`` shows.

    The core is :meth:`handle`, the only way in for the shell; the named
    methods (``start``, ``exit`` ...) are its spellings for the tests,
    returning the state reached.
    """

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
    moves: deque[Move] = field(default_factory=lambda: deque(maxlen=16))  # the last moves made
    restarts_by: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RESTART_REASONS, 0))  # restarts by cause
    restart_reason: str = ""  # the cause of the last restart (one of RESTART_REASONS), "" before any
    cause: str = ""  # how the last life ended, as a restart reason (crash, watchdog, spawn_error, operator; config)
    _restart_after_exit: bool = False
    _kill_reason: str = ""
    _deaths: deque[float] = field(default_factory=deque)
    _backoff: Backoff = field(init=False)

    def __post_init__(self) -> None:
        kw = {"rand": self.rand} if self.rand is not None else {}
        self._backoff = Backoff(self.policy.backoff_base, self.policy.backoff_cap, self.policy.reset_after, **kw)

    # ------------------------------------------------------------ the core

    def _go(self, event: Event) -> State:
        """The only place the state changes: one row of TRANSITIONS."""
        target = TRANSITIONS.get((self.state, event))
        if target is None:
            raise LifecycleError(f"{event.value} is not valid in state {self.state.value}")
        self.moves.append((self.state, event, target))
        self.state = target
        return target

    def handle(
        self,
        event: Event,
        now: float,
        *,
        ex: Exit | None = None,
        reason: str = "",
        restart: bool = True,
        counts_as_crash: bool = True,
    ) -> list[Action]:
        """Feed one input event; returns what the shell should do.

        ``ex`` comes with EXIT; ``reason`` with KILL (its cause), SPAWN_FAILED
        (the errno name) and START (:data:`OPERATOR` for an operator's start;
        none for a timer's); ``restart`` and ``counts_as_crash`` with KILL.
        """
        if (self.state, event) in IGNORED:
            return []
        if (self.state, event) not in TRANSITIONS:  # refused before any bookkeeping changes
            raise LifecycleError(f"{event.value} is not valid in state {self.state.value}")
        if event is Event.START:
            return self._start(now, reason)
        if event is Event.READY:
            self._go(Event.READY)
            self.ready_at = now
            self.reason = ""
            return [Action.WANT_SPARE]
        if event is Event.STOP:
            self._restart_after_exit = False
            scheduled = self._unschedule()
            live = self.state in (State.STARTING, State.RUNNING, State.STOPPING)
            self._go(Event.STOP)
            return [*scheduled, Action.DROP_SPARE, *([Action.TERMINATE] if live else [])]
        if event is Event.KILL:
            self._go(Event.KILL)
            self._restart_after_exit = restart
            self._kill_reason = reason if counts_as_crash else ""
            self.reason = reason
            return [Action.TERMINATE]
        if event is Event.SPAWN_FAILED:
            self._go(Event.SPAWN_FAILED)
            self.cause = "spawn_error"
            self.last_exit = Exit(code=None, signal=None, at=now)
            self.ended = f"spawn_error {reason}"
            return self._after_exit(now, f"spawn_error {reason}")
        if event is Event.EXIT:
            if ex is None:
                raise LifecycleError("exit needs its Exit")
            return self._exit(ex, now)
        raise LifecycleError(f"{event.value} is derived by the core, not an input")

    def _unschedule(self) -> list[Action]:
        """Forget a scheduled start; the shell cancels its timer (UNSCHEDULE) when there was one."""
        if self.next_start_at is None:
            return []
        self.next_start_at = None
        return [Action.UNSCHEDULE]

    def _start(self, now: float, reason: str) -> list[Action]:
        if self.started_at is not None:
            self.restarts += 1
            why = OPERATOR if reason == OPERATOR or self.cause not in RESTART_REASONS else self.cause
            self.restarts_by[why] += 1
            self.restart_reason = why
        self._go(Event.START)
        scheduled = self._unschedule()
        self.started_at = now
        self.ready_at = None
        self.waiting = ""
        self._restart_after_exit = False
        self._kill_reason = ""
        return [*scheduled, Action.SPAWN]

    def _exit(self, ex: Exit, now: float) -> list[Action]:
        ex = replace(ex, requested=self.state is State.STOPPING)  # we know whether we asked it to go
        self.last_exit = ex
        self.ended = describe(ex)
        if self.state is State.STOPPING:
            restart, cause = self._restart_after_exit, self._kill_reason
            if restart and cause:  # killed for a fault: a crash like any other
                self.cause = "watchdog"
                self._go(Event.EXIT_FAULT)
                return self._after_exit(now, cause)
            self._go(Event.EXIT)
            self.cause = OPERATOR
            if not restart:
                self.reason = "stopped"
                return [Action.DROP_SPARE]
            self.reason = "restart"  # an operator restart: straight back up, no backoff
            return [Action.RESTART]
        if ex.code == EX_CONFIG and (self.state, Event.EXIT_CONFIG) in TRANSITIONS:
            self._go(Event.EXIT_CONFIG)
            self.cause = "config"
            self.next_start_at = None
            self.reason = "config_error: " + (ex.message or "the child reported a configuration error")
            return [Action.DROP_SPARE]
        self._go(Event.EXIT)
        self.cause = "crash"
        return self._after_exit(now, "crashed: " + self.ended)

    def _after_exit(self, now: float, cause: str) -> list[Action]:
        """EXITED → BACKOFF, or FATAL when the restart intensity is exceeded."""
        self._deaths.append(now)
        while self._deaths and now - self._deaths[0] > self.policy.window:
            self._deaths.popleft()
        stable = self.stable(now)
        if stable:
            self._backoff.reset()  # stable uptime wipes the slate
            self.streak = 0
        self.streak += 1
        if len(self._deaths) > self.policy.intensity:
            self._go(Event.GIVE_UP)
            self.next_start_at = now + self.policy.fatal_cooldown
            self.reason = f"restart intensity: {len(self._deaths)} exits in {self.policy.window:g}s; last {cause}"
            self._deaths.clear()
            self._backoff.reset()
            return [Action.DROP_SPARE, Action.SCHEDULE]
        self._go(Event.REPOLICY)
        delay = 0.0 if stable else self._backoff.delay(now)  # the first crash after a stable run: at once
        self.delays.append(delay)
        self.next_start_at = now + delay
        self.reason = cause
        if stable:
            self.waiting = "it had been stable: restarted at once"
        else:
            self.waiting = f"{self.streak} crashes in a row: backoff {delay:.1f}s"
        return [Action.SCHEDULE]

    # ------------------------------------------------------------ spellings

    def start(self, now: float, reason: str = "") -> State:
        """Ask for a (re)start (``reason``: :data:`OPERATOR` for an operator's); the shell then spawns."""
        self.handle(Event.START, now, reason=reason)
        return self.state

    def ready(self, now: float) -> State:
        self.handle(Event.READY, now)
        return self.state

    def stop(self, now: float = 0.0) -> State:
        """Operator or shutdown stop: no restart afterwards."""
        self.handle(Event.STOP, now)
        return self.state

    def kill(self, reason: str, *, restart: bool = True, counts_as_crash: bool = True, now: float = 0.0) -> State:
        """The supervisor takes the child down to restart it (``reason``: heartbeat, stalled, restart)."""
        self.handle(Event.KILL, now, reason=reason, restart=restart, counts_as_crash=counts_as_crash)
        return self.state

    def spawn_failed(self, now: float, errno_name: str) -> State:
        self.handle(Event.SPAWN_FAILED, now, reason=errno_name)
        return self.state

    def exit(self, ex: Exit, now: float) -> State:
        """The process ended; decide what comes next."""
        self.handle(Event.EXIT, now, ex=ex)
        return self.state

    # ------------------------------------------------------------ queries

    @property
    def restart_now(self) -> bool:
        """An operator restart's exit landed and its start has not come yet (the RESTART action was given)."""
        return self.state is State.STOPPED and self.reason == "restart"

    def stable(self, now: float) -> bool:
        """Ready for ``stable_after`` or up for ``reset_after``: a crash now is not one of a row."""
        p = self.policy
        ready_long = self.ready_at is not None and now - self.ready_at >= p.stable_after
        up_long = self.started_at is not None and now - self.started_at >= p.reset_after
        return ready_long or up_long

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
