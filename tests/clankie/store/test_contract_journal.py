"""The journal's contract, one suite run against both adapters (files: today's journal.jsonl; postgres: each shard's
fenced rows), through the journal the bridge uses (:class:`bridge.journal.Journal`). What it promises: an admitted
delivery is open until its one close; a reopened journal (a restart; in the database, a tree taking the shard)
reads back the same open deliveries, oldest first, with their exact submissions; a malformed or unknown line costs
only itself; compaction forgets closed deliveries past the retention (and the text of the ones it keeps), never an
open one; the journal says it is full at its bound. In the database a tree that lost the shard writes nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import psycopg
import pytest

from bridge.journal import Journal
from clankie.protocol import Author, Room, Trigger, TurnOutcome, TurnSubmit
from clankie.store import database
from clankie.store.journal_pg import PgJournalStore
from clankie.store.journal_ports import JournalRefused
from clankie.store.leases import Fence
from tests.clankie.store.backends import RETENTION, Backend, FilesBackend, PostgresBackend

ROOM = Room(guild_id="1180000000000000000", channel_id="1180000000000000001", name="general")
OTHER = Room(guild_id="1180000000000000000", channel_id="1180000000000000002")
NOW = 1_800_000_000.0


@pytest.fixture(params=["files", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "files":
        return FilesBackend(tmp_path)
    return PostgresBackend(request.getfixturevalue("postgres_dsn"))


def submit(did: str, room: Room = ROOM, text: str = "hi") -> TurnSubmit:
    trigger = Trigger(message_id=did, author=Author(id="5", name="p"), text=text, at=NOW)
    return TurnSubmit(delivery_id=did, room=room, trigger=trigger)


def wire(room: Room, did: str) -> tuple[dict[str, object], dict[str, object]]:
    inbound: dict[str, object] = {"message_id": did, "channel_id": room.channel_id, "guild_id": room.guild_id,
                                  "author_id": "5"}
    return inbound, submit(did, room).trigger.to_wire()


def open_ids(journal: Journal) -> list[str]:
    return [e.delivery_id for e in journal.state.open_entries()]


def test_an_admitted_delivery_is_open_and_reads_back_with_its_exact_submission(backend: Backend, tmp_path: Path) -> None:
    with backend.journal(tmp_path) as journal:
        journal.admit(submit("11", text="the door code is 4711"), "fp11", NOW, catching_up=False)
        assert open_ids(journal) == ["11"]
    with backend.journal(tmp_path) as journal:
        assert open_ids(journal) == ["11"]
        entry = journal.state.open_entries()[0]
        assert entry.turn() == submit("11", text="the door code is 4711") and entry.fingerprint == "fp11"


def test_a_closed_delivery_is_closed_after_a_reopen(backend: Backend, tmp_path: Path) -> None:
    with backend.journal(tmp_path) as journal:
        journal.admit(submit("11"), "fp11", NOW, catching_up=False)
        journal.close("11", TurnOutcome.SETTLED, NOW + 1, message_ids=("1180000000000000099",))
        assert open_ids(journal) == []
    with backend.journal(tmp_path) as journal:
        entry = journal.state.entries["11"]
        assert not entry.open and entry.outcome == "settled" and entry.replied == 1180000000000000099


def test_a_reopen_reads_back_the_same_open_entries_oldest_first(backend: Backend, tmp_path: Path) -> None:
    """Admitted, buffered and waiting deliveries come back in admission order; a closed one and the ones a catch-up
    folded in do not come back on their own."""
    with backend.journal(tmp_path) as journal:
        journal.admit(submit("30"), "fp30", NOW + 3, catching_up=False)
        journal.admit(submit("10", OTHER), "fp10", NOW + 1, catching_up=False)
        journal.admit(submit("20"), "fp20", NOW + 2, catching_up=False)
        journal.close("20", TurnOutcome.SETTLED, NOW + 4)
        journal.buffer("41", NOW + 5, "fp41", ROOM, *wire(ROOM, "41"))
        journal.buffer("42", NOW + 6, "fp42", ROOM, *wire(ROOM, "42"))
        journal.admit(submit("43"), "fp43", NOW + 7, catching_up=True, folds=("41", "42"))
        journal.buffer("50", NOW + 8, "fp50", ROOM, *wire(ROOM, "50"), waiting=True)
        before = open_ids(journal)
    assert before == ["10", "30", "43", "50"]
    with backend.journal(tmp_path) as journal:
        assert open_ids(journal) == before
        assert journal.state.entries["43"].folds == ("41", "42") and journal.state.entries["50"].waiting
        assert journal.state.entries["10"].room == OTHER


def test_gaps_read_back_until_caught_up(backend: Backend, tmp_path: Path) -> None:
    with backend.journal(tmp_path) as journal:
        journal.admit(submit("11"), "fp11", NOW, catching_up=False)  # the shard is this tree's
        journal.gap(NOW + 1)
    with backend.journal(tmp_path) as journal:
        assert journal.state.quiet_since() == NOW + 1
        journal.caught_up(NOW + 2)
    with backend.journal(tmp_path) as journal:
        assert journal.state.quiet_since() is None


def _write_malformed(backend: Backend, tmp_path: Path) -> None:
    """Lines a reader does not know, between good ones: not JSON, another version, an unknown op, a close of a
    delivery never admitted, a field of the wrong type."""
    bad: list[object] = [{"v": 2, "op": "admit"}, {"v": 1, "op": "dance", "id": "1"},
                         {"v": 1, "op": "close", "id": "404", "at": NOW, "outcome": "settled"},
                         {"v": 1, "op": "admit", "id": "12", "at": "soon", "fp": "x", "submit": {}}]
    if isinstance(backend, FilesBackend):
        path = tmp_path / "bridge" / "journal.jsonl"
        with path.open("ab") as fh:
            fh.write(b"{not json\n" + b"".join(json.dumps(line).encode() + b"\n" for line in bad))
        return
    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        for line in bad:
            conn.execute("INSERT INTO clankie_journal_line (shard, op, line, bytes, written_epoch) "
                         "VALUES ('0/1', 'x', %s::json, 1, 1)", (json.dumps(line),))


def test_a_malformed_or_unknown_line_costs_only_itself(backend: Backend, tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    with backend.journal(tmp_path) as journal:
        journal.admit(submit("11"), "fp11", NOW, catching_up=False)
    _write_malformed(backend, tmp_path)
    with backend.journal(tmp_path) as journal:
        journal.admit(submit("13"), "fp13", NOW + 2, catching_up=False)
        journal.close("11", TurnOutcome.SETTLED, NOW + 3)
    caplog.clear()
    with backend.journal(tmp_path) as journal:
        assert open_ids(journal) == ["13"] and not journal.state.entries["11"].open
    warned = [r.getMessage() for r in caplog.records if "unreadable lines skipped" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("journal: 4 unreadable lines skipped" if isinstance(
        backend, PostgresBackend) else "journal: 5 unreadable lines skipped")
    assert "4711" not in warned[0] and "soon" not in warned[0]  # a reason names a field, never a value


def test_compaction_forgets_closed_deliveries_past_the_retention_and_never_an_open_one(backend: Backend,
                                                                                     tmp_path: Path) -> None:
    with backend.journal(tmp_path) as journal:
        journal.admit(submit("1", text="old and answered"), "fp1", NOW, catching_up=False)
        journal.close("1", TurnOutcome.SETTLED, NOW + 1)
        journal.admit(submit("2", text="old and open"), "fp2", NOW + 2, catching_up=False)
        journal.admit(submit("3", text="recent and answered"), "fp3", NOW + RETENTION, catching_up=False)
        journal.close("3", TurnOutcome.SETTLED, NOW + RETENTION + 1)
        size = journal.size
        assert asyncio.run(journal.compact(NOW + RETENTION + 10)) == 2
        assert journal.size < size
    with backend.journal(tmp_path) as journal:
        assert sorted(journal.state.entries) == ["2", "3"] and open_ids(journal) == ["2"]
        assert journal.state.entries["3"].submit is None  # a closed delivery keeps no text
    stored = (tmp_path / "bridge" / "journal.jsonl").read_text() if isinstance(backend, FilesBackend) else _rows(backend)
    assert "recent and answered" not in stored and "old and answered" not in stored and "old and open" in stored


def _rows(backend: PostgresBackend) -> str:
    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        return "\n".join(str(r[0]) for r in conn.execute("SELECT line::text FROM clankie_journal_line ORDER BY id"))


def test_the_journal_is_full_at_its_bound(backend: Backend, tmp_path: Path) -> None:
    """At ``CLANKIE_DISCORD_JOURNAL_MAX_BYTES`` the journal says it is full (the bridge then refuses a message that
    would wait); after a reopen it still is; compaction brings it back under."""
    with backend.journal(tmp_path, max_bytes=2000) as journal:
        for i in range(1, 6):
            journal.admit(submit(str(i), text="x" * 300), f"fp{i}", NOW, catching_up=False)
            journal.close(str(i), TurnOutcome.SETTLED, NOW)
        assert journal.full
    with backend.journal(tmp_path, max_bytes=2000) as journal:
        assert journal.full
        asyncio.run(journal.compact(NOW + 2 * RETENTION))
        assert journal.size < journal.max_bytes and journal.state.entries == {}


# ------------------------------------------------------------ postgres only: fencing and the shards


def _take_over(backend: PostgresBackend, shard: str = "0/1") -> Fence:
    """Another tree takes ``shard`` from the backend's tree: its new fence."""
    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        row = conn.execute("UPDATE clankie_shard_lease SET holder = 'tree-b', epoch = epoch + 1, "
                           "expires_at = now() + interval '10 minutes' WHERE shard = %s RETURNING epoch",
                           (shard,)).fetchone()
    assert row is not None
    return Fence(shard, "tree-b", int(str(row[0])))


def _count(backend: PostgresBackend) -> int:
    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM clankie_journal_line").fetchone()
    assert row is not None
    return int(str(row[0]))


def test_in_postgres_a_tree_that_lost_the_shard_writes_nothing_and_the_taker_drains_its_open_deliveries(
        postgres_dsn: str, tmp_path: Path) -> None:
    """The old holder's admit, buffer and close after another tree took the shard are refused (``stale_epoch``,
    counted) and nothing is written; the taker reads the open delivery the old holder left, closes it, and the old
    holder's stale compaction deletes nothing."""
    backend = PostgresBackend(postgres_dsn)
    with backend.journal(tmp_path / "a") as old:
        old.admit(submit("11", text="stuck"), "fp11", NOW, catching_up=False)
        rows = _count(backend)
        taker_fence = _take_over(backend)
        with pytest.raises(JournalRefused) as refused:
            old.admit(submit("12"), "fp12", NOW + 1, catching_up=False)
        assert refused.value.code == "stale_epoch"
        with pytest.raises(JournalRefused):
            old.buffer("13", NOW + 2, "fp13", ROOM, *wire(ROOM, "13"))
        old.close("11", TurnOutcome.SETTLED, NOW + 3)  # refused: logged, never raised
        old.gap(NOW + 4)
        assert _count(backend) == rows
        store = backend.journal_store
        assert isinstance(store, PgJournalStore) and store.stale_writes == 4 and store.last_error == "stale_epoch"
        taker_store = PgJournalStore(store.pool, {"0/1": taker_fence}.get, [(0, 1)])
        taker = Journal(tmp_path / "b", retention=RETENTION, store=taker_store)
        assert open_ids(taker) == [] and taker.take((0, 1)) == {"11"}
        assert open_ids(taker) == ["11"] and taker.state.open_entries()[0].turn() == submit("11", text="stuck")
        taker.close("11", TurnOutcome.SETTLED, NOW + 5)
        asyncio.run(old.compact(NOW + 10 * RETENTION))  # the old holder's compaction is fenced too
        assert _count(backend) == rows + 1
        # a tree that takes the shard back reads what the taker wrote (its own compaction had let 11 go from memory)
        assert old.take((0, 1)) == {"11"}
        assert open_ids(old) == []
        taker.aclose()


def test_in_postgres_a_shard_never_held_is_refused_before_the_database_and_gaps_go_to_held_shards(
        postgres_dsn: str, tmp_path: Path) -> None:
    """A line about a room on a shard this tree does not hold is ``not_held`` (not counted as stale); a gap line
    is written to each shard the bridge runs and holds, and only those."""
    backend = PostgresBackend(postgres_dsn)
    with backend.journal(tmp_path):
        pass  # the backend's tree holds 0/1, 0/2 and 1/2
    fences = {"0/2": backend.fences["0/2"]}
    sharded = PgJournalStore(database.open_sync_pool(postgres_dsn, ttl=600.0), fences.get, [(0, 2), (1, 2)])
    journal = Journal(tmp_path / "sharded", retention=RETENTION, store=sharded, shard_count=2)
    on_1 = Room(guild_id=str(1 << 22), channel_id="7")  # guild 1 << 22 is on shard 1 of 2
    with pytest.raises(JournalRefused) as refused:
        journal.admit(submit("21", on_1), "fp21", NOW, catching_up=False)
    assert refused.value.code == "not_held" and sharded.stale_writes == 0
    journal.gap(NOW)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        shards = [str(r[0]) for r in conn.execute("SELECT shard FROM clankie_journal_line WHERE op = 'gap'")]
    assert shards == ["0/2"]
    journal.aclose()
    sharded.pool.close()



def test_in_postgres_a_shard_taken_back_drains_only_what_this_bridge_did_not_know_and_rewrites_its_refused_closes(
        postgres_dsn: str, tmp_path: Path) -> None:
    """A bridge that lost the shard (its close refused meanwhile) and takes it back at a new epoch: the deliveries it
    knew are not handed back to drain (they are in its hands), one another tree admitted meanwhile is; the close it
    made while the lease was gone, which the database still has open, is written again, so no later take runs that
    delivery a second time."""
    backend = PostgresBackend(postgres_dsn)
    with backend.journal(tmp_path / "a") as journal:
        journal.admit(submit("11"), "fp11", NOW, catching_up=False)
        journal.admit(submit("12"), "fp12", NOW + 1, catching_up=False)
        other = _take_over(backend)
        journal.close("11", TurnOutcome.SETTLED, NOW + 2, message_ids=("1180000000000000099",))  # refused: logged
        store = backend.journal_store
        assert store is not None and store.stale_writes == 1
        meanwhile = Journal(tmp_path / "b", retention=RETENTION, store=PgJournalStore(store.pool, {"0/1": other}.get,
                                                                                      [(0, 1)]))
        meanwhile.take((0, 1))
        meanwhile.admit(submit("13"), "fp13", NOW + 3, catching_up=False)
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # tree-b lets go; tree-a takes the shard back
            row = conn.execute("UPDATE clankie_shard_lease SET holder = 'tree-a', epoch = epoch + 1 WHERE shard = '0/1' "
                               "RETURNING epoch").fetchone()
        assert row is not None
        backend.fences["0/1"] = Fence("0/1", "tree-a", int(str(row[0])))
        assert journal.take((0, 1)) == {"13"}
        assert open_ids(journal) == ["12", "13"] and journal.state.entries["11"].outcome == "settled"
        meanwhile.aclose()
    with backend.journal(tmp_path / "c") as later:
        assert open_ids(later) == ["12", "13"] and later.state.entries["11"].replied == 1180000000000000099
