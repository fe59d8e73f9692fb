"""Where each admitted message's one outcome is written: its closing receipt first, then its journal line.

A message's outcome is two writes in two files: its closing receipt
(:data:`bridge.receipts.CLOSING`, the evidence) and the journal's ``close``
line (the state, :mod:`bridge.journal`). No two files can be written at
once, so the order is fixed here, for every way a message closes (a turn's
outcome and its folds, a buffered message answered meanwhile, one out of a
full backlog, one past the horizon): **the receipt first**. A bridge killed
between the two leaves a receipt for an entry its journal says is open, and
the next start closes the entry from that receipt (:meth:`Ledger.from_receipt`)
instead of running it again, so every message has exactly one closing
receipt whichever instant the bridge dies. The other order would leave a
closed entry with no receipt, which nothing would ever find.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from bridge.disk import DiskHold
from bridge.journal import Journal
from bridge.journal_state import EXPIRED, Entry
from bridge.receipts import Closing, Outcome, Receipts
from clankie.protocol import Room, TurnOutcome


@dataclass(frozen=True, slots=True)
class Ledger:
    """The receipts, the journal and the full-disk hold that hears of a write the disk refused; the closing writes
    go through its methods, in the one order (module docstring)."""

    receipts: Receipts
    journal: Journal
    disk: DiskHold

    def closed(self, room: Room, delivery_id: str, outcome: TurnOutcome, at: float, *, folds: Collection[str] = (),
               code: str | None = None, turn_id: str | None = None, message_ids: tuple[str, ...] = ()) -> None:
        """A turn's outcome: its receipt, each folded message's (:attr:`TurnOutcome.folded`), then the journal's
        lines (the journal writes the folds' lines itself)."""
        self.receipts.record(outcome, reason=code, turn_id=turn_id, message_ids=message_ids, delivery_id=delivery_id,
                             channel_id=room.channel_id, guild_id=room.guild_id)
        for fold in folds:
            self.receipts.record(outcome.folded, reason=code, turn_id=turn_id, delivery_id=fold,
                                 channel_id=room.channel_id, guild_id=room.guild_id)
        self.journal.close(delivery_id, outcome, at, code=code, message_ids=message_ids)

    def expired(self, room: Room, delivery_id: str, at: float, *, folds: Collection[str] = (),
                dropped: str | None = None) -> None:
        """Closed unanswered: ``expired`` receipts (past the horizon) for it and its folds, or one ``dropped`` with
        that code (out of a full backlog), then ``expired`` in the journal."""
        step: Outcome = "expired" if dropped is None else "dropped"
        for did in (delivery_id, *folds):
            self.receipts.record(step, reason=dropped, delivery_id=did, channel_id=room.channel_id,
                                 guild_id=room.guild_id)
        self.journal.expire(delivery_id, at)

    def from_receipt(self, entry: Entry, receipt: Closing, written: Mapping[str, Closing], at: float) -> None:
        """Close a journal entry whose closing receipt a bridge wrote before it died: the receipt's outcome, code
        and posted ids go into the journal, and each folded message whose own receipt the kill cut off (not in
        ``written``) gets it now. No message gets a second closing receipt."""
        room = entry.room
        unanswered = receipt.outcome in (EXPIRED, "dropped")  # past the horizon, or out of a full backlog
        folded: Outcome = "expired" if unanswered else TurnOutcome(receipt.outcome).folded
        for fold in entry.folds:
            if fold not in written:
                self.receipts.record(folded, reason=receipt.reason, turn_id=receipt.turn_id, delivery_id=fold,
                                     channel_id=room.channel_id, guild_id=room.guild_id)
        if unanswered:
            self.journal.expire(entry.delivery_id, at)
        else:
            self.journal.close(entry.delivery_id, TurnOutcome(receipt.outcome), at, code=receipt.reason,
                               message_ids=receipt.message_ids)
