"""The journal's close lines and the receipts are byte-for-byte what they were when outcomes were strings.

The expected bytes were written by the code before :class:`clankie.protocol.TurnOutcome` (commit
5d24062): a journal or receipt file from then reads the same, and one written now is the same file.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from bridge.journal import Journal
from bridge.journal_state import JournalState
from bridge.receipts import Receipts
from clankie.protocol import Author, Room, Trigger, TurnOutcome, TurnSubmit

ROOM = Room(guild_id="1", channel_id="11")

OLD_CLOSES = (
    b'{"v":1,"op":"close","id":"42","at":3.0,"outcome":"settled","mids":["900"]}\n'
    b'{"v":1,"op":"close","id":"40","at":3.0,"outcome":"absorbed"}\n'
    b'{"v":1,"op":"close","id":"41","at":3.0,"outcome":"absorbed"}\n'
    b'{"v":1,"op":"close","id":"43","at":5.0,"outcome":"failed","code":"captain_model_failed"}\n'
    b'{"v":1,"op":"close","id":"44","at":7.0,"outcome":"expired"}\n'
)

OLD_RECEIPTS = (
    b'{"v":1,"at":12.0,"outcome":"settled","delivery_id":"42","guild_id":"1","channel_id":"11","turn_id":"turn-1-42",'
    b'"message_ids":["900"]}\n'
    b'{"v":1,"at":12.0,"outcome":"absorbed","delivery_id":"40","guild_id":"1","channel_id":"11","turn_id":"turn-1-42"}\n'
    b'{"v":1,"at":12.0,"outcome":"failed","delivery_id":"43","guild_id":"1","channel_id":"11",'
    b'"reason":"captain_model_failed","turn_id":"t"}\n'
    b'{"v":1,"at":12.0,"outcome":"silent","delivery_id":"45","guild_id":null,"channel_id":"11"}\n'
)


def submit(did: str) -> TurnSubmit:
    return TurnSubmit(delivery_id=did, room=ROOM, trigger=Trigger(message_id=did, author=Author(id="5"), text="hi"))


def test_the_journal_closes_a_catch_up_a_failure_and_an_expiry_with_the_old_lines(state_dir: Path) -> None:
    """A settled catch-up closes its folds ``absorbed`` (TurnOutcome.folded); ``expired`` is the journal's own."""

    async def main() -> bytes:
        journal = Journal(state_dir, retention=3600.0)
        for did in ("40", "41"):
            journal.buffer(did, 1.0, "fp", ROOM, {}, {})
        journal.admit(submit("42"), "fp", 2.0, catching_up=True, folds=("40", "41"))
        journal.close("42", TurnOutcome.SETTLED, 3.0, message_ids=("900",))
        journal.admit(submit("43"), "fp", 4.0, catching_up=False)
        journal.close("43", TurnOutcome.FAILED, 5.0, code="captain_model_failed")
        journal.buffer("44", 6.0, "fp", ROOM, {}, {})
        journal.expire("44", 7.0)
        journal.aclose()
        return journal.path.read_bytes()

    written = asyncio.run(main())
    assert b"".join(line for line in written.splitlines(keepends=True) if b'"op":"close"' in line) == OLD_CLOSES


def test_old_close_lines_read_back_to_the_same_outcomes() -> None:
    state = JournalState()
    for did in ("40", "41", "42", "43", "44"):
        state.read({"v": 1, "op": "buffer", "id": did, "at": 1.0, "fp": "fp", "room": ROOM.to_wire(),
                     "inbound": {}, "trigger": {}})
    for line in OLD_CLOSES.splitlines():
        state.read(json.loads(line))
    assert state.skipped == 0
    assert {did: e.outcome for did, e in state.entries.items()} == {
        "40": "absorbed", "41": "absorbed", "42": "settled", "43": "failed", "44": "expired"}


def test_receipts_of_each_outcome_are_the_old_lines(state_dir: Path) -> None:
    receipts = Receipts(state_dir, wall=lambda: 12.0)
    receipts.record(TurnOutcome.SETTLED, delivery_id="42", channel_id="11", guild_id="1", turn_id="turn-1-42",
                    message_ids=("900",))
    receipts.record(TurnOutcome.SETTLED.folded, delivery_id="40", channel_id="11", guild_id="1", turn_id="turn-1-42")
    receipts.record(TurnOutcome.FAILED, delivery_id="43", channel_id="11", guild_id="1",
                    reason="captain_model_failed", turn_id="t")
    receipts.record(TurnOutcome.SILENT, delivery_id="45", channel_id="11")
    receipts.close()
    assert receipts.path.read_bytes() == OLD_RECEIPTS
