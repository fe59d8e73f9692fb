"""The turns the bridge holds: each delivery while its turn runs, its phases, and the one owner of them all.

:class:`TurnState` is the one owner of the bridge's turn stores (discord.py's
``ConnectionState`` pattern): the deliveries held while their turns run and
the bridge's counters. Everyone else asks it (:meth:`TurnState.get`,
:meth:`TurnState.live_in`) or tells it (:meth:`TurnState.hold`,
:meth:`TurnState.let_go`, :meth:`TurnState.count`, :meth:`TurnState.ended`);
nobody is handed its dict. :class:`bridge.turns.Bridge` starts the turns,
:class:`bridge.turn.TurnHolder` carries each to its outcome, and
:class:`bridge.service_calls.ServiceCalls` serves the service's calls on a
held delivery, all through the same owner; the status reads
:meth:`TurnState.counts`.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from bridge.journal_state import Entry
from clankie.protocol import Room, TurnOutcome, TurnSubmit


class Phase(enum.Enum):
    SUBMITTED = "submitted"  # waiting for the service's result; typing may be lit
    DELIVERING = "delivering"  # result in hand, posting the reply
    DONE = "done"


PHASES: dict[Phase, frozenset[Phase]] = {
    Phase.SUBMITTED: frozenset({Phase.DELIVERING, Phase.DONE}),
    Phase.DELIVERING: frozenset({Phase.DONE}),
    Phase.DONE: frozenset(),
}


@dataclass(slots=True)
class Held:
    """A delivery the bridge is holding open while its turn runs."""

    submit: TurnSubmit
    fingerprint: str  # the admitted message's, for the journal
    catching_up: bool = False
    folds: tuple[str, ...] = ()  # buffered messages this catch-up turn answers too
    recovered: Entry | None = None  # set when the turn was read back from the journal
    phase: Phase = Phase.SUBMITTED
    typing: asyncio.Task[None] | None = None

    @property
    def room(self) -> Room:
        return self.submit.room

    @property
    def trigger_id(self) -> str:
        return self.submit.trigger.message_id

    def move(self, to: Phase) -> None:
        if to not in PHASES[self.phase]:
            raise AssertionError(f"delivery cannot go from {self.phase.value} to {to.value}")
        self.phase = to

    def stop_typing(self) -> None:
        if self.typing is not None:
            self.typing.cancel()


Counted = Literal["dropped", "buffered", "waited", "duplicates", "recovered", "expired"]
"""What admission and recovery count through :meth:`TurnState.count` (a held turn counts itself)."""


@dataclass(slots=True)
class Counters:
    """The bridge's counters since it started (the heartbeat's report); written only by :class:`TurnState`."""

    admitted: int = 0
    dropped: int = 0
    buffered: int = 0
    waited: int = 0  # admitted while every turn slot was taken (each runs when one frees)
    duplicates: int = 0
    recovered: int = 0
    expired: int = 0
    replies: int = 0
    reply_failures: int = 0
    by_outcome: dict[TurnOutcome, int] = field(default_factory=dict)  # the status's outcomes (the wire strings)


class TurnState:
    """The one owner of the held deliveries and the counters (module docstring); methods, never its stores."""

    def __init__(self) -> None:
        self._held: dict[str, Held] = {}
        self._counters = Counters()

    # ------------------------------------------------------------ the held deliveries

    def hold(self, held: Held) -> None:
        """A started turn's delivery is held from now until :meth:`let_go` (and counted admitted)."""
        self._held[held.submit.delivery_id] = held
        self._counters.admitted += 1

    def let_go(self, delivery_id: str) -> None:
        """The delivery's turn is over, however it ended: its typing stops and it is no longer held."""
        held = self._held.pop(delivery_id, None)
        if held is not None:
            held.stop_typing()

    def get(self, delivery_id: str) -> Held | None:
        """The held delivery with this id (None: not held, so the service's call on it is refused)."""
        return self._held.get(delivery_id)

    def live_in(self, channel_id: str) -> bool:
        """Whether a submitted, not-yet-done delivery is held in this channel (a message now is steered)."""
        return any(h.room.channel_id == channel_id and h.phase is Phase.SUBMITTED for h in self._held.values())

    def __len__(self) -> int:
        return len(self._held)

    def __iter__(self) -> Iterator[Held]:
        return iter(list(self._held.values()))

    def stop_typing(self) -> None:
        """At the bridge's stop: every held delivery's typing stops."""
        for held in self._held.values():
            held.stop_typing()

    # ------------------------------------------------------------ the counters

    def count(self, what: Counted, n: int = 1) -> None:
        """One more (or ``n``) of what admission or recovery did with a message."""
        c = self._counters
        match what:
            case "dropped":
                c.dropped += n
            case "buffered":
                c.buffered += n
            case "waited":
                c.waited += n
            case "duplicates":
                c.duplicates += n
            case "recovered":
                c.recovered += n
            case "expired":
                c.expired += n

    def ended(self, outcome: TurnOutcome, *, replied: bool, reply_failed: bool) -> None:
        """A held turn ended with ``outcome``; its reply was posted (``replied``) or could not be (``reply_failed``)."""
        c = self._counters
        c.by_outcome[outcome] = c.by_outcome.get(outcome, 0) + 1
        c.replies += replied
        c.reply_failures += reply_failed

    def counts(self) -> Counters:
        """A copy of the counters, for the status (changing it changes nothing here)."""
        c = self._counters
        return Counters(c.admitted, c.dropped, c.buffered, c.waited, c.duplicates, c.recovered, c.expired, c.replies,
                        c.reply_failures, dict(c.by_outcome))
