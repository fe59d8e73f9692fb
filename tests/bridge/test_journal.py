"""The ingress journal: what it remembers of each delivery, and that compaction forgets only what it may."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from bridge.journal import COMPACT_MIN_LINES, Journal
from bridge.journal_state import JournalState
from clankie.appender import DiskError
from clankie.jsonl import read_lines
from clankie.protocol import Author, Room, Trigger, TurnOutcome, TurnSubmit
from tests.disk import writes_refused_past

ROOM = Room(guild_id="100", channel_id="101", name="general")
OTHER = Room(guild_id="100", channel_id="102")


def submit(did: str, room: Room = ROOM, text: str = "hi") -> TurnSubmit:
    trigger = Trigger(message_id=did, author=Author(id="5", name="p"), text=text, at=float(did))
    return TurnSubmit(delivery_id=did, room=room, trigger=trigger)


def admit(did: str, at: float, room: Room = ROOM, **extra: Any) -> dict[str, Any]:
    return {"v": 1, "op": "admit", "id": did, "at": at, "fp": f"fp{did}", "submit": submit(did, room).to_wire(), **extra}


def buffer(did: str, at: float) -> dict[str, Any]:
    trigger = submit(did).trigger
    inbound = {"message_id": did, "channel_id": ROOM.channel_id, "guild_id": ROOM.guild_id, "author_id": "5"}
    return {"v": 1, "op": "buffer", "id": did, "at": at, "fp": f"fp{did}", "room": ROOM.to_wire(),
            "inbound": inbound, "trigger": trigger.to_wire()}


def close(did: str, outcome: str = "settled") -> dict[str, Any]:
    return {"v": 1, "op": "close", "id": did, "at": 0.0, "outcome": outcome}


def state_of(*lines: Mapping[str, object]) -> JournalState:
    s = JournalState()
    for line in lines:
        s.read(line)
    return s


def test_open_deliveries_come_back_oldest_first_with_the_exact_submission() -> None:
    """Recovery re-submits what has no outcome, oldest first, with the record that was first submitted."""
    s = state_of(admit("30", 3.0), admit("10", 1.0), admit("20", 2.0), close("20"))
    assert [e.delivery_id for e in s.open_entries()] == ["10", "30"]
    assert s.open_entries()[0].turn() == submit("10")


def test_a_catch_up_turn_carries_its_folded_messages_to_one_outcome() -> None:
    """Buffered messages folded into a catch-up are not resumed on their own; the catch-up's close ends them."""
    s = state_of(buffer("1", 1.0), buffer("2", 2.0), buffer("3", 3.0))
    assert [e.delivery_id for e in s.open_entries()] == ["1", "2", "3"]
    s.read(admit("3", 3.0, catch_up=True, folds=["1", "2"]))
    assert [e.delivery_id for e in s.open_entries()] == ["3"]
    assert s.open_entries()[0].catching_up and s.open_entries()[0].folds == ("1", "2")


def test_unreadable_lines_are_counted_and_skipped() -> None:
    """A line that names no known delivery or op is ignored; everything else still folds."""
    s = state_of({"op": "close", "id": "404", "outcome": "settled"}, {"op": "dance", "id": "1"},
                 admit("2", 2.0), close("2", "exploded"))
    assert s.skipped == 3
    assert [e.delivery_id for e in s.open_entries()] == ["2"]


def test_rooms_since_names_each_active_room_with_its_newest_message_before_the_gap() -> None:
    """Rooms with a delivery inside the horizon are read back from the newest message admitted before the gap."""
    s = state_of(admit("10", 1.0), admit("50", 5.0), close("50"), admit("20", 9.0, room=OTHER), admit("5", 0.5))
    assert s.rooms_since(4.0, before=10.0) == {"101": (ROOM, "50"), "102": (OTHER, "20")}
    assert s.rooms_since(6.0, before=10.0) == {"102": (OTHER, "20")}
    # what the new session admitted (after the gap began at 4.0) is not a mark: the gap is read from "10"
    assert s.rooms_since(0.0, before=4.0) == {"101": (ROOM, "10"), "102": (OTHER, None)}
    # our own reply is a mark only if it was posted before the gap began
    s.read({"v": 1, "op": "close", "id": "10", "at": 3.0, "outcome": "settled", "mids": ["60"]})
    s.read({"v": 1, "op": "close", "id": "5", "at": 7.0, "outcome": "settled", "mids": ["70"]})
    assert s.rooms_since(0.0, before=4.0)["101"] == (ROOM, "60")
    assert s.rooms_since(0.0, before=8.0)["101"] == (ROOM, "70")


def test_compaction_forgets_only_closed_deliveries_past_the_retention(tmp_path: Path) -> None:
    """Open deliveries survive any compaction; closed ones are kept for de-duplication until the retention ends."""

    async def main() -> None:
        j = Journal(tmp_path, retention=100.0)
        j.admit(submit("1"), "fp1", 10.0, catching_up=False)
        j.admit(submit("2"), "fp2", 20.0, catching_up=False)
        j.admit(submit("3"), "fp3", 150.0, catching_up=False)
        j.close("1", TurnOutcome.SETTLED, 11.0, message_ids=("900",))
        j.close("3", TurnOutcome.SILENT, 151.0)
        left = await j.compact(now=160.0)  # "1" closed and admitted before 60: forgotten
        assert left == 2
        j.aclose()
        reread = Journal(tmp_path, retention=100.0)
        assert sorted(reread.state.entries) == ["2", "3"]
        assert [e.delivery_id for e in reread.state.open_entries()] == ["2"]
        assert reread.state.entries["3"].outcome == "silent" and reread.state.entries["3"].fingerprint == "fp3"
        assert stat.S_IMODE(os.stat(reread.path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(reread.path.parent).st_mode) == 0o700
        reread.aclose()

    asyncio.run(main())


def test_compaction_rebuilds_the_same_state_it_was_made_from() -> None:
    """The compacted lines of any state fold back into that state; a closed delivery keeps no message text."""
    s = state_of(buffer("1", 1.0), buffer("2", 2.0), admit("2", 2.0, catch_up=True, folds=["1"]),
                 admit("3", 3.0), admit("4", 4.0), close("4", "failed"),
                 buffer("5", 5.0))
    again = state_of(*s.compacted(since=0.0))
    def view(st: JournalState) -> list[tuple[str, str | None, tuple[str, ...], str | None, bool | None]]:
        return sorted((e.delivery_id, e.outcome, e.folds, e.folded_into, e.submit is None if e.open else None)
                      for e in st.entries.values() if e.open)

    assert view(again) == view(s)
    assert again.entries["4"].outcome == "failed" and again.entries["4"].submit is None
    assert [e.delivery_id for e in again.open_entries()] == ["2", "3", "5"]


def test_a_message_waiting_for_its_pace_keeps_its_pace_key_through_compaction() -> None:
    """A ``wait`` line with ``paced`` (its author's pace key) folds into an entry that says so, also once its turn is
    admitted, and compaction writes lines that fold back to the same: a restart puts it back under its author."""
    waited = {**buffer("1", 1.0), "op": "wait", "paced": "100:5"}
    slot = {**buffer("2", 2.0), "op": "wait"}
    s = state_of(waited, slot, {**buffer("3", 3.0), "op": "wait", "paced": "100:5"}, admit("3", 3.0))
    assert [(e.delivery_id, e.waiting, e.paced) for e in s.entries.values()] == [
        ("1", True, "100:5"), ("2", True, None), ("3", True, "100:5")]
    again = state_of(*s.compacted(since=0.0))
    assert {d: (e.paced, e.submit is None) for d, e in again.entries.items()} == {
        "1": ("100:5", True), "2": (None, True), "3": ("100:5", False)}


def test_a_crash_mid_line_costs_only_that_line(tmp_path: Path) -> None:
    """The journal reads back every complete line after a torn one, and appends after it."""

    async def main() -> None:
        j = Journal(tmp_path, retention=100.0)
        j.admit(submit("1"), "fp1", 1.0, catching_up=False)
        j.aclose()
        with open(j.path, "ab") as fh:
            fh.write(b'{"v":1,"op":"admit","id":"2","at":2.0,"fp":"f')
        again = Journal(tmp_path, retention=100.0)
        assert [e.delivery_id for e in again.state.open_entries()] == ["1"]
        again.close("1", TurnOutcome.SETTLED, 3.0)
        again.aclose()
        assert [line["op"] for line in read_lines(j.path)] == ["admit", "close"]

    asyncio.run(main())


def test_a_long_run_compacts_as_it_goes_so_entries_past_the_retention_leave_memory(tmp_path: Path) -> None:
    """A bridge that never restarts still forgets closed deliveries past the retention: the journal compacts
    whenever it has doubled since the last compaction, so memory and file stay near what the retention keeps."""

    async def main() -> None:
        j = Journal(tmp_path, retention=100.0)
        most = 0
        for i in range(1, 20_001):  # one delivery a second for 20,000 s: 200 times the retention
            did = str(i)
            j.admit(submit(did), f"fp{did}", float(i), catching_up=False)
            j.close(did, TurnOutcome.SETTLED, float(i))
            if j._compacting is not None:
                await j._compacting
            most = max(most, len(j.state.entries))
        assert most <= COMPACT_MIN_LINES  # within the retention: 100 entries, plus what waits for the next compaction
        assert "1" not in j.state.entries and "20000" in j.state.entries
        assert len(read_lines(j.path)) <= 2 * COMPACT_MIN_LINES + 2
        j.aclose()

    asyncio.run(main())


def test_a_closed_delivery_lets_go_of_its_text_at_once_and_rooms_are_held_once() -> None:
    """At its close a delivery drops its submission and payload from memory (only recovery's marks stay); its
    room is the same object as every other entry's in that room; one admitted again after its close is open."""
    s = state_of(admit("1", 1.0), admit("2", 2.0), buffer("3", 3.0), close("1"), close("3", "absorbed"))
    one, two, three = (s.entries[d] for d in ("1", "2", "3"))
    assert (one.submit, one.buffered, three.buffered) == (None, None, None) and two.submit is not None
    assert one.room is two.room is three.room
    s.read(admit("1", 4.0))  # its turn could not be run, and Discord sent it again
    assert s.entries["1"].open and s.entries["1"].at == 4.0 and s.entries["1"].turn() == submit("1")


class Saved:
    """A de-duplication memory as the journal sees it."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def snapshot(self) -> bytes:
        return self.data


def test_compaction_saves_the_dedupe_memory_first_and_a_refused_save_keeps_every_line(tmp_path: Path) -> None:
    """``seen.bin`` is written (0600) before closed entries leave the journal; if the disk refuses it, the
    compaction fails as a whole and the journal keeps its lines."""

    async def main() -> None:
        j = Journal(tmp_path, retention=100.0, remembered=Saved(b"ids"))
        j.admit(submit("1"), "fp1", 10.0, catching_up=False)
        j.close("1", TurnOutcome.SETTLED, 11.0)
        assert j.read_seen() is None
        assert await j.compact(now=200.0) == 0
        assert j.read_seen() == b"ids" and stat.S_IMODE(os.stat(j.seen_path).st_mode) == 0o600
        j.admit(submit("2"), "fp2", 210.0, catching_up=False)
        j.close("2", TurnOutcome.SETTLED, 211.0)
        with writes_refused_past(len(b"ids")):
            j.remembered = Saved(b"more ids")
            with pytest.raises(DiskError):
                await j.compact(now=400.0)
        assert "2" in j.state.entries and [line["id"] for line in read_lines(j.path)] == ["2", "2"]
        assert j.read_seen() == b"ids"
        j.aclose()

    asyncio.run(main())
