"""The child lifecycle: a pure, table-driven state machine.

No I/O and no clock: every event carries ``now`` (monotonic seconds). The
shell (:mod:`supervisor.process`) feeds events in and acts on the resulting
state: spawn in STARTING, signal in STOPPING, schedule a start at
``next_start_at`` in BACKOFF or FATAL.

Restart policy, applied to **every** unrequested exit (before or after
RUNNING): a full-jitter backoff (:class:`clankie.backoff.Backoff`) whose
sequence resets after ``reset_after`` seconds of stable uptime (that first
crash after a stable run restarts at once, with no delay), and a
restart intensity: more than ``intensity`` unrequested exits within
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
    reset_after: float = 60.0
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
        stable = self.started_at is not None and now - self.started_at >= self.policy.reset_after
        if stable:
            self._backoff.reset()  # stable uptime wipes the slate
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
        return self.state

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
