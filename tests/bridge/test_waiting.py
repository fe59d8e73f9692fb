"""Messages waiting for a turn slot: rooms served oldest first and in turn, a room's waiting messages as one turn
(and a drifted room's backlog as one catch-up turn, built the same way from the same journal entries)."""

from __future__ import annotations

from typing import Any

from bridge.journal_state import JournalState
from bridge.waiting import MAX_JOIN, WaitQueue, joined
from clankie.protocol import Author, Room, Trigger
from tests.bridge.test_journal import admit, close

ROOM = Room(guild_id="100", channel_id="101")


def wait(did: str, at: float, *, text: str = "hi", unprompted: bool = True, op: str = "wait") -> dict[str, Any]:
    trigger = Trigger(message_id=did, author=Author(id="5", name="p"), text=text, at=at, unprompted=unprompted)
    inbound = {"message_id": did, "channel_id": ROOM.channel_id, "guild_id": ROOM.guild_id, "author_id": "5",
               "text": text}
    return {"v": 1, "op": op, "id": did, "at": at, "fp": f"fp{did}", "room": ROOM.to_wire(),
            "inbound": inbound, "trigger": trigger.to_wire()}


def test_rooms_are_served_in_the_order_their_oldest_message_came_each_whole() -> None:
    """A room takes one turn per pass with everything it has waiting; a room that gets more later goes to the back."""
    q = WaitQueue()
    for channel, mid in [("A", "1"), ("B", "2"), ("A", "3"), ("C", "4"), ("A", "5")]:
        q.add(channel, mid)
    assert (len(q), q.rooms, q.waits("A"), q.waits("Z")) == (5, 3, True, False)
    assert q.take() == ("A", ["1", "3", "5"])
    q.add("A", "6")
    assert [q.take(), q.take(), q.take(), q.take()] == [("B", ["2"]), ("C", ["4"]), ("A", ["6"]), None]
    assert (len(q), q.rooms) == (0, 0)


def test_a_room_with_more_waiting_than_one_turn_carries_takes_its_oldest_and_goes_to_the_back() -> None:
    """One turn takes at most MAX_JOIN (the trigger and a full backlog of 50); the rest of the room waits behind
    the other rooms, so a room with hundreds waiting neither overflows a turn nor starves the rest."""
    q = WaitQueue()
    for n in range(MAX_JOIN + 10):
        q.add("A", str(n))
    q.add("B", "b")
    assert q.take() == ("A", [str(n) for n in range(MAX_JOIN)])
    assert (len(q), q.rooms, q.waits("A")) == (11, 2, True)
    assert q.take() == ("B", ["b"])
    assert q.take() == ("A", [str(n) for n in range(MAX_JOIN, MAX_JOIN + 10)])
    s = JournalState()
    for n in range(MAX_JOIN):
        s.read(wait(str(n), float(n)))
    turn = joined([s.entries[str(n)] for n in range(MAX_JOIN)])
    assert turn is not None and len(turn.submit.backlog) == MAX_JOIN - 1  # it fits a TurnSubmit


def test_a_rooms_waiting_messages_join_into_one_turn_for_the_newest() -> None:
    """The newest triggers the turn, the older ones are its context (oldest first); addressed if any was."""
    s = JournalState()
    for line in (wait("1", 1.0, text="one"), wait("2", 2.0, text="clankie, two", unprompted=False), wait("3", 3.0, text="three")):
        s.read(line)
    turn = joined([s.entries[i] for i in ("1", "2", "3")])
    assert turn is not None
    sub = turn.submit
    assert sub.trigger.message_id == "3" and turn.folds == ("1", "2")
    assert not sub.trigger.unprompted and not turn.catching_up
    assert (sub.delivery_id, sub.room, turn.fingerprint) == ("3", ROOM, "fp3")
    assert [(m.id, m.text) for m in sub.backlog] + [(sub.trigger.message_id, sub.trigger.text)] == [
        ("1", "one"), ("2", "clankie, two"), ("3", "three")]


def test_a_catch_up_backlog_joins_the_same_way_and_is_unprompted() -> None:
    """A drifted room's buffered messages (``buffer`` entries) become its catch-up turn: the newest triggers it, the
    rest are its context, and it is unprompted even if one of them was addressed (catch-up turns never ask)."""
    s = JournalState()
    for line in (wait("3", 3.0, op="buffer"), wait("4", 4.0, op="buffer", unprompted=False), wait("5", 5.0, op="buffer")):
        s.read(line)
    turn = joined([s.entries[i] for i in ("3", "4", "5")], catching_up=True)
    assert turn is not None
    assert turn.catching_up and turn.submit.trigger.unprompted
    assert turn.submit.delivery_id == "5" and turn.folds == ("3", "4") and [m.id for m in turn.submit.backlog] == ["3", "4"]


def test_closed_or_already_submitted_entries_are_left_out_and_nothing_left_is_no_turn() -> None:
    """A waiting message that was closed (expired) or already ran is not joined again."""
    s = JournalState()
    for line in (wait("1", 1.0), wait("2", 2.0), close("1", "expired"), admit("2", 2.0)):
        s.read(line)
    assert joined([s.entries["1"], s.entries["2"]]) is None


def test_waiting_lines_survive_compaction_and_a_turn_ends_their_wait() -> None:
    """``wait`` entries rebuild as waiting (not as catch-up buffers); the turn that joins them folds them in."""
    s = JournalState()
    for line in (wait("1", 1.0), wait("2", 2.0)):
        s.read(line)
    again = JournalState()
    for compacted in s.compacted(since=0.0):
        again.read(compacted)
    assert [(e.delivery_id, e.waiting, e.submit is None) for e in again.open_entries()] == [("1", True, True), ("2", True, True)]
    again.read(admit("2", 2.0, folds=["1"]))
    assert [e.delivery_id for e in again.open_entries()] == ["2"]
    assert again.entries["1"].folded_into == "2"
