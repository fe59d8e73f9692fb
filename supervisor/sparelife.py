"""The warm spare's slot: a pure, table-driven state machine (no I/O, no clock; ``now`` is passed in).

Its shell is :mod:`supervisor.spare`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from clankie.backoff import Backoff
from clankie.errors import LocalProtocolError


class SpareLifeError(LocalProtocolError):
    """Raised when the shell feeds an event the spare slot's current state does not accept: a bug on our side."""


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
"""Every legal (state, event) pair of a child's spare slot and where it leads."""

SPARE_IGNORED: frozenset[tuple[SpareState, SpareEvent]] = frozenset(
    {(s, SpareEvent.PARKED) for s in (_S.OFF, _S.PARKED, _S.BACKOFF)}  # a late word from a spare already dropped
    | {(s, SpareEvent.TAKE) for s in (_S.OFF, _S.WARMING, _S.BACKOFF)}  # nothing parked: the child starts cold
    | {(s, SpareEvent.EXIT) for s in (_S.OFF, _S.BACKOFF)}  # a dropped spare's death
    | {(s, SpareEvent.DUE) for s in (_S.OFF, _S.WARMING, _S.PARKED)}  # no backoff running
)
"""Pairs that change nothing rather than raise; with the table they cover every pair, and ``_go`` refuses the rest."""


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
            raise SpareLifeError(f"spare {event.value} is not valid in state {self.state.value}")
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
        if (self.state, SpareEvent.PARKED) in SPARE_IGNORED:
            return self.state
        self._backoff.reset()
        return self._go(SpareEvent.PARKED)

    def take(self) -> bool:
        """True when a parked spare is there to become the child (and is now taken)."""
        if (self.state, SpareEvent.TAKE) in SPARE_IGNORED:
            return False
        self._go(SpareEvent.TAKE)
        self.taken += 1
        return True

    def exit(self, now: float, how: str) -> SpareState:
        """The spare died untaken: back off before the next one."""
        if (self.state, SpareEvent.EXIT) in SPARE_IGNORED:
            return self.state
        self._go(SpareEvent.EXIT)
        delay = self._backoff.delay(now)
        self.next_start_at = now + delay
        self.reason = f"spare {how}; next spare in {delay:.1f}s"
        return self.state

    def due(self, now: float) -> bool:
        """True (and WARMING) when a backoff ran out: the shell spawns a spare now."""
        if (self.state, SpareEvent.DUE) in SPARE_IGNORED or self.next_start_at is None or now < self.next_start_at:
            return False  # no backoff running, or it has not run out yet
        self._go(SpareEvent.DUE)
        self.next_start_at = None
        self.spawned += 1
        return True

    def drop(self) -> SpareState:
        self.next_start_at = None
        return self._go(SpareEvent.DROP)
