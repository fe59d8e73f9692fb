"""The journal's stored lines: typed records, byte-compatible with the journals earlier bridges wrote, and a
malformed line costs only itself.

``fixtures/journal-main.jsonl`` and ``fixtures/journal-main-compacted.jsonl`` were written by main's bridge (at
0a93a7b, before the lines were typed) running :func:`write_every_kind` and then a compaction at 1100.0: every kind of
line (``gap``, ``admit`` with and without ``catch_up``/``folds``, ``buffer``, ``wait`` with and without ``paced``,
``close`` with ``code`` and ``mids``, a fold's and an expiry's ``close``, ``caught_up``, and compaction's ``closed``
and rewritten ``admit``/``wait``).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

import pytest

from bridge.inbound import Inbound
from bridge.journal import Journal
from bridge.journal_files import decode
from bridge.journal_lines import MalformedLine, parse_line
from clankie.protocol import Author, Room, Trigger, TurnOutcome, TurnSubmit

FIXTURES = Path(__file__).parent / "fixtures"
ROOM = Room(guild_id="100", channel_id="101", name="general")
DM = Room(guild_id=None, channel_id="301")


def trigger(did: str, text: str, *, unprompted: bool = False) -> Trigger:
    return Trigger(message_id=did, author=Author(id="5", name="p\u00e9"), text=text, at=1700000000.0 + int(did) % 1000,
                   unprompted=unprompted)


def inbound(did: str, text: str, room: Room = ROOM) -> Inbound:
    return Inbound(message_id=did, channel_id=room.channel_id, guild_id=room.guild_id, author_id="5", text=text,
                   mentions_bot=True)


def submit(did: str, text: str, *, unprompted: bool = False) -> TurnSubmit:
    return TurnSubmit(delivery_id=did, room=ROOM, trigger=trigger(did, text, unprompted=unprompted))


def write_every_kind(j: Journal) -> None:
    """The sequence the fixtures were written from: every kind of line the bridge writes."""
    j.gap(1000.0)
    j.admit(submit("1001", "hello \u263a"), "fp1001", 1000.5, catching_up=False)
    j.close("1001", TurnOutcome.SETTLED, 1001.0, message_ids=("2001", "2002"))
    for d in ("1002", "1003"):
        j.buffer(d, 1002.0, f"fp{d}", ROOM, inbound(d, f"buffered {d}").to_wire(),
                 trigger(d, f"buffered {d}", unprompted=True).to_wire())
    j.admit(submit("1003", "buffered 1003", unprompted=True), "fp1003", 1002.0, catching_up=True, folds=("1002",))
    j.close("1003", TurnOutcome.SILENT, 1003.0)
    j.buffer("1004", 1004.0, "fp1004", ROOM, inbound("1004", "waits for a slot").to_wire(),
             trigger("1004", "waits for a slot").to_wire(), waiting=True)
    j.buffer("1005", 1005.0, "fp1005", DM, inbound("1005", "paced", DM).to_wire(), trigger("1005", "paced").to_wire(),
             paced="5:301")
    j.buffer("1006", 1005.5, "fp1006", ROOM, inbound("1006", "paced two").to_wire(), trigger("1006", "paced two").to_wire(),
             paced="5:101")
    j.admit(submit("1006", "paced two"), "fp1006", 1005.5, catching_up=False)
    j.admit(submit("1007", "fails"), "fp1007", 1006.0, catching_up=False)
    j.close("1007", TurnOutcome.FAILED, 1007.0, code="captain_turn_stalled")
    j.buffer("1008", 1008.0, "fp1008", ROOM, inbound("1008", "falls out").to_wire(), trigger("1008", "falls out").to_wire())
    j.expire("1008", 1009.0)
    j.admit(submit("1009", "open at the kill"), "fp1009", 1010.0, catching_up=False)
    j.caught_up(1010.5)
    j.gap(1011.0)


def test_a_journal_written_by_main_is_read_back_whole(tmp_path: Path) -> None:
    """Every line of a journal in today's format parses (none skipped) and folds into the entries it describes."""
    (tmp_path / "bridge").mkdir(mode=0o700)
    shutil.copyfile(FIXTURES / "journal-main.jsonl", tmp_path / "bridge" / "journal.jsonl")
    j = Journal(tmp_path, retention=100.0)
    state = j.state
    assert state.skipped == 0
    assert [e.delivery_id for e in state.open_entries()] == ["1004", "1005", "1006", "1009"]
    assert {d: e.outcome for d, e in state.entries.items() if not e.open} == {
        "1001": "settled", "1002": "silent", "1003": "silent", "1007": "failed", "1008": "expired"}
    assert state.entries["1001"].replied == 2002 and state.entries["1003"].folds == ("1002",)
    assert state.entries["1002"].folded_into == "1003"
    assert (state.entries["1004"].waiting, state.entries["1005"].paced, state.entries["1006"].paced) == (True, "5:301",
                                                                                                        "5:101")
    assert state.entries["1009"].turn() == submit("1009", "open at the kill")
    payload = state.entries["1005"].payload()
    assert payload is not None and Inbound.from_wire(payload["inbound"]) == inbound("1005", "paced", DM)
    assert state.quiet_since() == 1011.0
    j.aclose()


def test_this_bridge_writes_the_same_bytes_as_main(tmp_path: Path) -> None:
    """The same calls write the fixture's bytes exactly, and a compaction rewrites them as main's did."""

    async def main() -> None:
        j = Journal(tmp_path, retention=100.0)
        write_every_kind(j)
        assert j.path.read_bytes() == (FIXTURES / "journal-main.jsonl").read_bytes()
        j.aclose()
        again = Journal(tmp_path, retention=100.0)
        await again.compact(1100.0)
        assert again.path.read_bytes() == (FIXTURES / "journal-main-compacted.jsonl").read_bytes()
        again.aclose()
        third = Journal(tmp_path, retention=100.0)  # and the compacted file reads back into the same entries
        assert third.state.skipped == 0 and sorted(third.state.entries) == sorted(again.state.entries)
        third.aclose()

    asyncio.run(main())


def test_a_malformed_line_is_skipped_with_its_reason_and_the_others_are_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Garbage, an unknown op, a missing field, a wrong type, another version and a close of an unknown delivery are
    each skipped and named in one warning (by line number, kind and field, never a value); every good line around
    them is read, and a torn last line (a crash mid-write) is not an error."""
    good = (FIXTURES / "journal-main.jsonl").read_bytes().splitlines(keepends=True)
    bad = [b"not json at all\n", b'{"v":1,"op":"dance","id":"1"}\n', b'{"v":1,"op":"admit","id":"7","at":1.0}\n',
           b'{"v":1,"op":"close","id":"1009","at":"soon","outcome":"settled"}\n',
           b'{"v":2,"op":"gap","since":1.0}\n', b'{"v":1,"op":"close","id":"404","at":1.0,"outcome":"settled"}\n']
    mixed = [good[0], bad[0], *good[1:5], bad[1], bad[2], *good[5:12], bad[3], bad[4], *good[12:], bad[5]]
    (tmp_path / "bridge").mkdir(mode=0o700)
    (tmp_path / "bridge" / "journal.jsonl").write_bytes(b"".join(mixed) + b'{"v":1,"op":"gap","si')
    with caplog.at_level(logging.WARNING, logger="bridge.journal"):
        j = Journal(tmp_path, retention=100.0)
    assert j.state.skipped == 1  # the close of an unknown delivery; the five malformed never reached the state
    assert [e.delivery_id for e in j.state.open_entries()] == ["1004", "1005", "1006", "1009"]
    warning = "\n".join(r.getMessage() for r in caplog.records)
    assert "6 unreadable lines skipped" in warning
    for reason in ("line 2: not JSON", "line 7: no known op", "line 8: admit line: submit is not an object",
                   "close line: at is not a number", "not a version 1 line",
                   "close line: closes a delivery the journal does not hold"):
        assert reason in warning
    assert "soon" not in warning and "dance" not in warning
    j.aclose()


def test_each_kind_parses_to_its_typed_line_and_a_wrong_one_says_what_is_wrong() -> None:
    """The parser returns the stored line as its kind and refuses what is not one, naming the kind and the field."""
    stored = decode((FIXTURES / "journal-main.jsonl").read_bytes())
    assert stored.unreadable == []
    assert [parse_line(line.raw)["op"] for line in stored.lines][:4] == ["gap", "admit", "close", "buffer"]
    assert parse_line({"v": 1, "op": "close", "id": 9, "at": 1, "outcome": "silent", "mids": [5, "6"]}) == {
        "v": 1, "op": "close", "id": "9", "at": 1.0, "outcome": "silent", "mids": ["5", "6"]}
    for raw, says in (([], "not a JSON object"), ({"v": 1, "op": "close", "id": "1", "outcome": "exploded"},
                                                  "close line: outcome is not an outcome"),
                      ({"v": 1, "op": "wait", "id": "1", "at": 1.0, "fp": "f", "room": {}, "inbound": [],
                        "trigger": {}}, "wait line: inbound is not an object"),
                      ({"v": 1, "op": "admit", "id": "1", "at": 1.0, "fp": "f", "submit": {}},
                       "admit line: submit has no room")):
        with pytest.raises(MalformedLine, match=says):
            parse_line(raw)
