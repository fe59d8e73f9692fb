"""The warm spare's slot: a pure, table-driven state machine (no I/O, no clock; ``now`` is passed in).

Its shell is :mod:`supervisor.spare`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import assert_never

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
    WANT = "want"  # the child is running: prepare the next spare (after the shell's delay, or when its backoff ends)
    WARM = "warm"  # the want's delay ran out: warm one now
    PARKED = "parked"  # the spare said `parked` on its link
    TAKE = "take"  # it becomes the child
    EXIT = "exit"  # it died (or was killed) before it was taken
    DUE = "due"  # its backoff ran out
    DROP = "drop"  # no spare wanted any more (stop, shutdown)


class SpareAction(enum.Enum):
    """What the shell does after an event, in the order returned."""

    ARM = "arm"  # feed WARM after the want's delay (one timer at a time)
    SPAWN = "spawn"  # start a spare process now; an exec error is fed back as EXIT
    SCHEDULE = "schedule"  # feed DUE at next_start_at
    REPORT = "report"  # the slot's phrase changed (parked): log it and tell the tree
    HAND_OVER = "hand_over"  # the parked spare's process becomes the child's
    UNSCHEDULE = "unschedule"  # cancel the timer (ARM's or SCHEDULE's)
    TERMINATE = "terminate"  # a live spare process is asked to go (SIGTERM, SIGKILL after a grace)


_S = SpareState
SPARE_TRANSITIONS: dict[tuple[SpareState, SpareEvent], SpareState] = {
    (_S.OFF, SpareEvent.WANT): _S.OFF,  # ARM: it is warmed after the shell's delay
    (_S.WARMING, SpareEvent.WANT): _S.WARMING,
    (_S.PARKED, SpareEvent.WANT): _S.PARKED,
    (_S.BACKOFF, SpareEvent.WANT): _S.BACKOFF,  # SCHEDULE: it comes when the backoff ends
    (_S.OFF, SpareEvent.WARM): _S.WARMING,
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
    {(s, SpareEvent.WARM) for s in (_S.WARMING, _S.PARKED, _S.BACKOFF)}  # one is there, or comes when its backoff ends
    | {(s, SpareEvent.PARKED) for s in (_S.OFF, _S.PARKED, _S.BACKOFF)}  # a late word from a spare already dropped
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
        """The only place the state changes: one row of SPARE_TRANSITIONS."""
        target = SPARE_TRANSITIONS.get((self.state, event))
        if target is None:
            raise SpareLifeError(f"spare {event.value} is not valid in state {self.state.value}")
        self.state = target
        return target

    def handle(self, event: SpareEvent, now: float, *, how: str = "") -> list[SpareAction]:
        """Feed one event; returns what the shell should do. ``how`` comes with EXIT: how the spare ended.

        The only way in for the shell (:meth:`supervisor.spare.Spare._feed`); the named methods below are its
        spellings for the tests.
        """
        if (self.state, event) in SPARE_IGNORED:
            return []
        match event:
            case SpareEvent.WANT:
                before = self.state
                self._go(event)
                return [SpareAction.ARM] if before is SpareState.OFF else (
                    [SpareAction.SCHEDULE] if before is SpareState.BACKOFF else [])
            case SpareEvent.WARM | SpareEvent.DUE:
                if event is SpareEvent.DUE and (self.next_start_at is None or now < self.next_start_at):
                    return []  # the one row that waits on time: not yet
                self._go(event)
                self.next_start_at = None
                self.spawned += 1
                if event is SpareEvent.WARM:
                    self.reason = ""  # a fresh want forgets the last death (status shows it only in backoff)
                return [SpareAction.SPAWN]
            case SpareEvent.PARKED:
                self._go(event)
                self._backoff.reset()
                return [SpareAction.REPORT]
            case SpareEvent.TAKE:
                self._go(event)
                self.taken += 1
                return [SpareAction.HAND_OVER]
            case SpareEvent.EXIT:
                self._go(event)
                delay = self._backoff.delay(now)
                self.next_start_at = now + delay
                self.reason = f"spare {how}; next spare in {delay:.1f}s"
                return [SpareAction.SCHEDULE]
            case SpareEvent.DROP:
                self._go(event)
                self.next_start_at = None
                return [SpareAction.UNSCHEDULE, SpareAction.TERMINATE]
            case _:
                assert_never(event)

    # ------------------------------------------------------------ spellings for the tests

    def want(self) -> bool:
        """The child is running and the delay has passed; True when a spare is to be spawned now."""
        return SpareAction.SPAWN in self.handle(SpareEvent.WARM, 0.0)

    def parked(self) -> SpareState:
        self.handle(SpareEvent.PARKED, 0.0)
        return self.state

    def take(self) -> bool:
        """True when a parked spare is there to become the child (and is now taken)."""
        return SpareAction.HAND_OVER in self.handle(SpareEvent.TAKE, 0.0)

    def exit(self, now: float, how: str) -> SpareState:
        """The spare died untaken: back off before the next one."""
        self.handle(SpareEvent.EXIT, now, how=how)
        return self.state

    def due(self, now: float) -> bool:
        """True (and WARMING) when a backoff ran out: the shell spawns a spare now."""
        return SpareAction.SPAWN in self.handle(SpareEvent.DUE, now)

    def drop(self) -> SpareState:
        self.handle(SpareEvent.DROP, 0.0)
        return self.state
