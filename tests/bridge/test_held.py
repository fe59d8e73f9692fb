"""The one owner of the turns' stores: the held deliveries and the counters, through its methods only."""

from __future__ import annotations

from bridge.held import Held, Phase, TurnState
from clankie.protocol import Author, Room, Trigger, TurnOutcome, TurnSubmit

ROOM = Room(guild_id="100", channel_id="101")


def held(did: str, room: Room = ROOM) -> Held:
    trigger = Trigger(message_id=did, author=Author(id="5", name="p"), text="hi", at=1.0)
    return Held(TurnSubmit(delivery_id=did, room=room, trigger=trigger), f"fp{did}")


def test_a_delivery_is_held_from_hold_until_let_go_and_counted_admitted_once() -> None:
    """``hold`` makes a delivery findable by id and counts it admitted; ``let_go`` forgets it (twice is harmless)."""
    turns = TurnState()
    one = held("1")
    turns.hold(one)
    assert turns.get("1") is one and len(turns) == 1 and list(turns) == [one]
    turns.let_go("1")
    turns.let_go("1")
    assert turns.get("1") is None and len(turns) == 0
    assert turns.counts().admitted == 1


def test_a_room_has_a_live_turn_only_while_one_of_its_deliveries_waits_for_its_result() -> None:
    """A message in a room whose held delivery is still submitted is steered; one delivering or done is not live."""
    turns = TurnState()
    one = held("1")
    turns.hold(one)
    turns.hold(held("2", Room(guild_id="100", channel_id="102")))
    assert turns.live_in("101") and turns.live_in("102") and not turns.live_in("103")
    one.move(Phase.DELIVERING)
    assert not turns.live_in("101")


def test_counts_are_a_copy_and_each_end_counts_its_outcome_and_reply() -> None:
    """What admission counts, and each turn's end (outcome, reply posted, reply failed), show in ``counts``; the
    copy handed out changes nothing in the owner."""
    turns = TurnState()
    turns.count("dropped")
    turns.count("duplicates", 3)
    turns.ended(TurnOutcome.SETTLED, replied=True, reply_failed=False)
    turns.ended(TurnOutcome.SETTLED, replied=False, reply_failed=True)
    turns.ended(TurnOutcome.SILENT, replied=False, reply_failed=False)
    seen = turns.counts()
    assert (seen.dropped, seen.duplicates, seen.replies, seen.reply_failures) == (1, 3, 1, 1)
    assert seen.by_outcome == {TurnOutcome.SETTLED: 2, TurnOutcome.SILENT: 1}
    seen.by_outcome.clear()
    seen.dropped = 99
    assert turns.counts().dropped == 1 and turns.counts().by_outcome[TurnOutcome.SETTLED] == 2
