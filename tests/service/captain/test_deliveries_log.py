"""The delivery log: one line per change in numbered segments, an index of latest lines, bounded in time, size and count."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from dataclasses import fields
from pathlib import Path

import pytest

from clankie.protocol import TurnResult
from clankie.testing.clock import FakeClock
from service.captain.deliveries.delivery_log import CLOSING_MAX, MAX_RETAINED, SEGMENT_BYTES
from service.captain.deliveries.record import Entry, legacy_name
from service.captain.deliveries.store import RETENTION_SECONDS, DeliveryStore, Retained, RunIt, reckon
from tests.disk import writes_refused_past

FP = "f" * 64
TREE = "tree-1"  # every store here is a process of one supervised tree
SETTLED = TurnResult.settled("eight o'clock, same lobby", turn_id="turn-1-d1")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "deliveries"


def store_on(directory: Path, clock: FakeClock, *, max_retained: int = MAX_RETAINED, segment_bytes: int = SEGMENT_BYTES) -> DeliveryStore:
    """A store as a new service process of the same supervised tree opens it: the directory, nothing in memory."""
    return DeliveryStore(directory, clock, max_retained=max_retained, segment_bytes=segment_bytes, tree=TREE)


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_bytes().splitlines() if line]


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def turn(store: DeliveryStore, did: str, run: str, result: TurnResult | None = SETTLED) -> None:
    """One delivery through accept, join and (unless ``result`` is None) settle."""
    store.accept(did, FP)
    store.join(run, [did])
    if result is not None:
        store.settle(did, result)


# ------------------------------------------------------------------- lines and restarts


def test_each_change_appends_one_line_holding_the_whole_record(directory: Path, clock: FakeClock) -> None:
    """Accept, join and settle are three lines in one 0600 segment in a 0700 directory, each the full record."""
    store = store_on(directory, clock)
    turn(store, "d1", "r1")
    [segment] = store.log.segments()
    assert [(ln["run"], ln["result"] is not None) for ln in lines(segment)] == [(None, False), ("r1", False), (None, True)]
    assert set(lines(segment)[0]) == {"delivery_id", "fingerprint", "accepted_at", "run", "crashed_runs", "result"}
    assert stat.S_IMODE(segment.stat().st_mode) == 0o600 and stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_a_new_store_on_the_same_directory_sees_every_record(directory: Path, clock: FakeClock) -> None:
    """Across restarts, settled, joined and merely accepted records come back as they were left."""
    first = store_on(directory, clock)
    turn(first, "d1", "r1")
    turn(first, "d2", "r1", result=None)
    second = store_on(directory, clock)
    second.accept("d3", FP, ("r1",))
    third = store_on(directory, clock)
    at = clock.wall()
    assert third.load("d1") == Retained("d1", FP, at, SETTLED, None, ())
    assert third.load("d2") == Retained("d2", FP, at, None, "r1", (), TREE)
    assert third.load("d3") == Retained("d3", FP, at, None, None, ("r1",))


def test_the_latest_line_for_a_delivery_wins_within_and_across_segments(directory: Path, clock: FakeClock) -> None:
    """A delivery accepted in one process and settled in the next reads as settled, however many lines it has."""
    first = store_on(directory, clock)
    turn(first, "d1", "r1", result=None)
    second = store_on(directory, clock)
    decision = reckon(second.load("d1"), FP, 3, tree=TREE)
    assert decision == RunIt(("r1",))
    second.accept("d1", FP, decision.crashed_runs)
    second.join("r2", ["d1"])
    second.settle("d1", SETTLED)
    assert store_on(directory, clock).load("d1") == Retained("d1", FP, clock.wall(), SETTLED, None, ("r1",))


def test_a_torn_last_line_is_skipped_and_the_record_before_it_stands(
    directory: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash mid-write leaves part of a line; a restart skips it, keeps the earlier line, and writes on cleanly."""
    store = store_on(directory, clock)
    turn(store, "d1", "r1", result=None)
    [segment] = store.log.segments()
    settled = json.dumps({**lines(segment)[-1], "run": None, "result": SETTLED.to_wire()}).encode()
    with segment.open("ab") as fh:
        fh.write(settled[: len(settled) // 2])  # the settle line the crash cut
    with caplog.at_level("INFO"):
        again = store_on(directory, clock)
    assert again.load("d1") == Retained("d1", FP, clock.wall(), None, "r1", (), TREE)
    assert f"torn last line of delivery segment {segment.name}" in caplog.text and "garbled" not in caplog.text
    again.accept("d2", FP)
    assert [store_on(directory, clock).load(d) is not None for d in ("d1", "d2")] == [True, True]


def test_a_garbled_line_is_logged_by_place_and_skipped(
    directory: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A line that is not a record is skipped with a warning naming its segment and byte, never its content."""
    store = store_on(directory, clock)
    turn(store, "d1", "r1")
    [segment] = store.log.segments()
    good = segment.read_bytes()
    bad = json.dumps({"delivery_id": "d2", "fingerprint": FP, "accepted_at": "soon", "result": {"text": "zx-secret"}})
    segment.write_bytes(good + b"\xffnot json zx-secret\n" + bad.encode() + b"\n")
    with caplog.at_level("WARNING"):
        again = store_on(directory, clock)
    assert again.load("d1") == Retained("d1", FP, clock.wall(), SETTLED, None, ())
    assert again.load("d2") is None
    assert f"garbled line in delivery segment {segment.name} at byte {len(good)}" in caplog.text
    assert caplog.text.count("garbled line") == 2 and "zx-secret" not in caplog.text


def test_a_result_is_read_back_from_the_disk_not_kept_in_memory(directory: Path, clock: FakeClock) -> None:
    """The index keeps no result text; a re-submission's answer is read from the record's line on disk."""
    store = store_on(directory, clock)
    turn(store, "d1", "r1")
    entry = store.log.get("d1")
    assert entry is not None and entry.settled
    assert {f.name for f in fields(Entry)} == {"fingerprint", "accepted_at", "run", "crashed_runs", "settled",
                                               "file", "offset", "length", "tree"}
    assert SETTLED.text not in repr(entry)
    [segment] = store.log.segments()
    segment.write_bytes(segment.read_bytes().replace(b"same lobby", b"same place"))  # same length, same offsets
    loaded = store.load("d1")
    assert loaded is not None and loaded.result is not None and loaded.result.text == "eight o'clock, same place"


# ------------------------------------------------------------------- bounded in size and time


def test_segments_rotate_at_their_size_and_are_read_in_order(directory: Path, clock: FakeClock) -> None:
    """With 2 kB segments, twenty turns fill several, none much past the size, and a restart reads them all."""
    store = store_on(directory, clock, segment_bytes=2048)
    for n in range(20):
        turn(store, f"d{n}", f"r{n}")
    segments = store.log.segments()
    assert len(segments) > 3 and [p.name for p in segments] == [f"{n}.jsonl" for n in range(len(segments))]
    longest = max(len(line) + 1 for p in segments for line in p.read_bytes().splitlines())
    assert all(p.stat().st_size < 2048 + longest for p in segments)
    again = store_on(directory, clock)
    assert all(again.load(f"d{n}") == Retained(f"d{n}", FP, clock.wall(), SETTLED, None, ()) for n in range(20))


def test_segments_rotated_under_a_live_loop_close_once_synced(
    directory: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """In the service, a rotated segment is closed after its last sync, so no sync fails; aclose makes the rest durable."""

    async def main() -> None:
        store = store_on(directory, clock, segment_bytes=1024)
        for n in range(30):
            store.accept(f"d{n}", FP)
            await asyncio.sleep(0)
        await store.aclose()

    with caplog.at_level("ERROR"):
        asyncio.run(main())
    assert caplog.text == ""
    again = store_on(directory, clock)
    assert len(again.log.segments()) > 3 and all(again.load(f"d{n}") is not None for n in range(30))


def test_rotations_faster_than_the_disk_hold_at_most_closing_max_segments_and_lose_no_line(
    directory: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Past CLOSING_MAX segments waiting for their sync, the next rotated one is closed at once; every line stays."""

    async def main() -> int:
        store = store_on(directory, clock, segment_bytes=512)
        n = 0
        while len(store.log.segments()) <= CLOSING_MAX + 2:  # no await: no segment's sync can finish meanwhile
            store.accept(f"d{n}", FP)
            n += 1
        assert len(store.log._closing) == CLOSING_MAX
        await store.aclose()
        assert len(store.log._closing) == 0
        return n

    with caplog.at_level("ERROR"):
        written = asyncio.run(main())
    assert caplog.text == ""
    again = store_on(directory, clock)
    assert all(again.load(f"d{n}") is not None for n in range(written))


def test_a_segment_goes_as_soon_as_no_record_needs_it(directory: Path, clock: FakeClock) -> None:
    """When every delivery with its latest line in an old segment has a newer line elsewhere, that segment is unlinked."""
    store = store_on(directory, clock, segment_bytes=1024)
    n = 0
    while len(store.log.segments()) < 2:
        store.accept(f"d{n}", FP)
        n += 1
    first = store.log.segments()[0]
    in_first = [f"d{i}" for i in range(n) if store.log.get(f"d{i}").file == first]  # type: ignore[union-attr]  # every d{i} was written above
    for did in in_first[:-1]:
        store.settle(did, SETTLED)
        assert first.exists()  # one record still needs it
    store.settle(in_first[-1], SETTLED)
    assert not first.exists()
    assert all(store_on(directory, clock).load(f"d{i}") is not None for i in range(n))


def test_expired_records_leave_the_index_on_accept_and_their_segments_go(directory: Path, clock: FakeClock) -> None:
    """Past the retention, the next accept forgets the old records and unlinks every segment only they needed."""
    store = store_on(directory, clock, segment_bytes=1024)
    for n in range(12):
        turn(store, f"old{n}", f"r{n}")
    old_segments = store.log.segments()
    assert len(old_segments) > 2
    clock.advance(RETENTION_SECONDS + 1)
    store.accept("new", FP)
    assert len(store.log) == 1 and store.log.get("old0") is None
    assert not any(p.exists() for p in old_segments[:-1])  # the last one held lines, and is current: rotated out later
    assert store.prune() == 0  # nothing more to expire


def test_a_restart_drops_expired_records_and_segments_only_they_needed(directory: Path, clock: FakeClock) -> None:
    """A restarted store indexes nothing expired; its start-up prune counts them and unlinks their segments."""
    store = store_on(directory, clock)
    turn(store, "d1", "r1")
    clock.advance(RETENTION_SECONDS + 1)
    reader = store_on(directory, clock)
    assert reader.load("d1") is None and len(reader.log) == 0
    before = names(directory)
    restarted = store_on(directory, clock)
    assert restarted.prune() == 1
    assert before == ["0.jsonl"] and names(directory) == []


def test_a_delivery_accepted_again_is_the_newest_for_expiry(directory: Path, clock: FakeClock) -> None:
    """Re-accepting a delivery after a crash moves it behind later ones: the earlier others expire, it does not."""
    first = store_on(directory, clock)
    first.accept("d1", FP)
    clock.advance(60)
    first.accept("d2", FP)
    first.settle("d2", SETTLED)  # finished: age may take it (an unfinished one it never does)
    clock.advance(60)
    second = store_on(directory, clock)
    second.accept("d1", FP)  # re-submitted to the restarted service
    clock.advance(RETENTION_SECONDS - 30)  # d1's first and d2's acceptance are past the retention; d1's second is not
    second.accept("d3", FP)
    assert [second.log.get(d) is not None for d in ("d1", "d2", "d3")] == [True, False, True]


# ------------------------------------------------------------------- bounded in count


def test_at_the_cap_the_oldest_settled_records_are_forgotten_first(
    directory: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """With room for three, a fourth record forgets the oldest settled one, not an older one still running."""
    store = store_on(directory, clock, max_retained=3)
    turn(store, "d1", "r1")
    store.accept("d2", FP)  # running here
    turn(store, "d3", "r3")
    with caplog.at_level("WARNING"):
        store.accept("d4", FP)
    assert [store.load(d) is not None for d in ("d1", "d2", "d3", "d4")] == [False, True, True, True]
    assert "delivery records at the cap of 3" in caplog.text
    store.accept("d5", FP)
    assert [store.load(d) is not None for d in ("d2", "d3", "d4", "d5")] == [True, False, True, True]
    store.accept("d6", FP)  # nothing settled left and every one is running here: none can go
    assert len(store.log) == 4
    restarted = store_on(directory, clock, max_retained=3)  # the same cap: the same records are forgotten
    assert reckon(restarted.load("d1"), FP, 3, tree=TREE) == RunIt(())  # re-submitted, d1 runs again as new


def test_at_the_cap_records_a_dead_process_left_open_go_after_the_settled_ones(directory: Path, clock: FakeClock) -> None:
    """Unsettled records of an earlier process are forgotten, oldest first, once no settled record is left to forget."""
    first = store_on(directory, clock)
    turn(first, "d1", "r1", result=None)
    turn(first, "d2", "r1")
    turn(first, "d3", "r1", result=None)
    second = store_on(directory, clock, max_retained=3)
    second.accept("d4", FP)
    assert [second.load(d) is not None for d in ("d1", "d2", "d3", "d4")] == [True, False, True, True]
    second.accept("d5", FP)
    assert [second.load(d) is not None for d in ("d1", "d3", "d4", "d5")] == [False, True, True, True]


def test_a_restart_with_a_lower_cap_keeps_the_newest_and_unlinks_the_rest(directory: Path, clock: FakeClock) -> None:
    """A directory holding more records than the cap is cut to the cap at start-up; segments no one needs go."""
    first = store_on(directory, clock, segment_bytes=1024)
    for n in range(10):
        clock.advance(1)
        turn(first, f"d{n}", f"r{n}")
    second = store_on(directory, clock, max_retained=2)
    second.prune()
    assert [second.load(f"d{n}") is not None for n in range(10)] == [False] * 8 + [True, True]
    assert len(second.log.segments()) == 1  # d8 and d9 share the last segment


# ------------------------------------------------------------------- the old format


def test_old_format_records_are_read_once_then_moved_into_the_log(directory: Path, clock: FakeClock) -> None:
    """Old one-file-per-delivery records load as before; the first prune appends the live ones and removes every file."""
    directory.mkdir(mode=0o700)

    def old(did: str, **record: object) -> Path:
        path = directory / legacy_name(did)
        path.write_text(json.dumps({"delivery_id": did, "fingerprint": FP, "accepted_at": clock.wall(), **record}))
        return path

    old("d1", run=None, crashed_runs=["r0"], result=SETTLED.to_wire())
    old("d2", run="r1", crashed_runs=[], result=None)
    old("d3", attempts=2, result=None)
    old("d4", accepted_at=clock.wall() - RETENTION_SECONDS - 1, run=None, result=SETTLED.to_wire())  # expired
    (directory / legacy_name("d5")).write_text("{not json")
    (directory / (legacy_name("d6")[:-5] + ".tmp")).write_text("{}")  # a half-done replacement
    expected = {
        "d1": Retained("d1", FP, clock.wall(), SETTLED, None, ("r0",)),
        "d2": Retained("d2", FP, clock.wall(), None, "r1", ()),  # no tree: from before trees were named
        "d3": Retained("d3", FP, clock.wall(), None, None, ()),
        "d4": None,
        "d5": None,
    }
    store = store_on(directory, clock)
    assert {d: store.load(d) for d in expected} == expected
    assert store.prune() == 1
    assert [p.suffix for p in directory.iterdir()] == [".jsonl"]
    assert {d: store.load(d) for d in expected} == expected
    assert {d: store_on(directory, clock).load(d) for d in expected} == expected
    store.accept("d2", FP, ("r1",))  # the migrated record goes on like any other
    assert store_on(directory, clock).load("d2") == Retained("d2", FP, clock.wall(), None, None, ("r1",))


def test_a_migration_the_disk_refuses_keeps_the_old_files_for_the_next_start(
    directory: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """If the migrated lines cannot be written, the old files stay and still answer; the next start moves them."""
    directory.mkdir(mode=0o700)
    record = {"delivery_id": "d1", "fingerprint": FP, "accepted_at": clock.wall(), "run": None, "crashed_runs": [],
              "result": SETTLED.to_wire()}
    (directory / legacy_name("d1")).write_text(json.dumps(record))
    expected = Retained("d1", FP, clock.wall(), SETTLED, None, ())
    store = store_on(directory, clock)
    with writes_refused_past(10), caplog.at_level("ERROR"):
        assert store.prune() == 0
    assert "could not migrate delivery records (disk_efbig)" in caplog.text
    assert store.load("d1") == expected and (directory / legacy_name("d1")).exists()
    restarted = store_on(directory, clock)
    restarted.prune()
    assert restarted.load("d1") == expected and not (directory / legacy_name("d1")).exists()


def test_a_store_that_only_loads_changes_nothing_on_disk(directory: Path, clock: FakeClock) -> None:
    """Opening and reading a directory (a tool, a test beside a live service) never migrates, rotates or unlinks."""
    turn(store_on(directory, clock), "d1", "r1")
    clock.advance(RETENTION_SECONDS + 1)  # 0.jsonl is now needed by no record
    (directory / legacy_name("d2")).write_text(json.dumps({"delivery_id": "d2", "fingerprint": FP,
                                                           "accepted_at": clock.wall(), "result": None}))
    before = {p.name: os.stat(p).st_size for p in directory.iterdir()}
    reader = store_on(directory, clock)
    assert [reader.load(d) is not None for d in ("d1", "d2")] == [False, True]
    assert {p.name: os.stat(p).st_size for p in directory.iterdir()} == before
