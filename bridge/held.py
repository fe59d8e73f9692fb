"""A delivery the bridge holds while its turn runs, the phases it moves through, and the bridge's counters."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field

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


@dataclass(slots=True)
class Counters:
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
