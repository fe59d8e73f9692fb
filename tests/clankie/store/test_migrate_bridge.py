"""``clankie migrate --to postgres``, the bridge's part (bridge/migrate.py): the dedupe memory and the journal's open
deliveries, written by the real file adapters, copied into a real PostgreSQL under the migration's leases, read back
through the PostgreSQL adapters; idempotent, counted, a differing row a conflict. And end to end: a postgres-profile
bridge on another machine, after the move, neither answers a remembered message again nor loses an admitted one."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bridge.dedupe import Dedupe
from bridge.journal import Journal
from bridge.migrate import migrate as migrate_bridge
from clankie import ipc
from clankie.protocol import Author, Room, Trigger, TurnOutcome, TurnResult, TurnSubmit
from clankie.settings import load
from clankie.shards import room_shard
from clankie.store import database
from clankie.store.bridge_pg import PgDedupe
from clankie.store.journal_pg import PgJournalStore
from clankie.store.leases import Fence, PgLeases
from clankie.store.ports import SeenAs, fingerprint_key
from clankie.testing.clock import FakeClock
from clankie.testing.fake_discord import FakeDiscord
from tests.bridge.harness import CHAN, CHAN2, GUILD, PERSON, running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]  # real processes (`clankie migrate`, a bridge's discord.py)

REPO = Path(__file__).resolve().parents[3]
CLANKIE = shutil.which("clankie", path=str(Path(sys.executable).parent)) or "clankie"
HORIZON, RETENTION = 900.0, 7 * 3600.0  # the settings' defaults
ROOM = Room(guild_id="100", channel_id="101")
OLD = "1000000000000000001"  # admitted two hours ago: past the journal's horizon, only the saved memory has it
CLOSED, OPEN, WAITING = "1000000000000000002", "1000000000000000003", "1000000000000000004"


def submit(did: str, room: Room = ROOM) -> TurnSubmit:
    trigger = Trigger(message_id=did, author=Author(id="5", name="p"), text=f"hello {did}", at=1.0)
    return TurnSubmit(delivery_id=did, room=room, trigger=trigger)


def wait_args(did: str, room: Room = ROOM) -> tuple[dict[str, Any], dict[str, Any]]:
    inbound = {"message_id": did, "channel_id": room.channel_id, "guild_id": room.guild_id, "author_id": "5"}
    return inbound, submit(did, room).trigger.to_wire()


async def write_files(state: Path, now: float) -> None:
    """A files bridge's memory as its own adapters write it: an id the last compaction saved (``seen.bin``), a
    delivery admitted and closed, one admitted and open, one waiting for a turn slot."""
    memory = Dedupe(retention=RETENTION, horizon=HORIZON, bound=1000)
    journal = Journal(state, retention=HORIZON, remembered=memory)
    memory.add(OLD, "fp-old", now - 7200 + RETENTION)
    await journal.compact(now - 100)  # writes seen.bin with OLD, as a compaction does
    journal.admit(submit(CLOSED), "fp-closed", now - 60, catching_up=False)
    journal.close(CLOSED, TurnOutcome.SETTLED, now - 50, message_ids=("1000000000000000009",))
    journal.admit(submit(OPEN), "fp-open", now - 30, catching_up=False)
    inbound, trigger = wait_args(WAITING)
    journal.buffer(WAITING, now - 20, "fp-waiting", ROOM, inbound, trigger, waiting=True)
    journal.aclose()


def cli(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
    return subprocess.run([CLANKIE, "migrate", "--to", "postgres"], env=full, capture_output=True, text=True,
                          check=False, cwd=REPO, timeout=120)


def rows(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql.encode()).fetchall()


async def read_back(dsn: str, now: float, state: Path) -> tuple[dict[str, SeenAs], set[str], list[str]]:
    """Through the PostgreSQL adapters, as a tree that takes the shard would: what the dedupe says of each id, the
    ids it recalls, and the deliveries a journal on the database drains (read under a lease of our own)."""
    pool = await database.open_pool(dsn, ttl=60.0)
    try:
        leases = PgLeases(pool)
        epoch = await leases.acquire("0/1", "reader", 60.0)
        assert epoch is not None
        fence = Fence("0/1", "reader", epoch)
        dedupe = PgDedupe(leases, (0, 1), {"0/1": fence}.get)
        said = {did: await dedupe.check(did, fp, now) for did, fp in
                ((OLD, "fp-old"), (CLOSED, "fp-closed"), (OPEN, "fp-open"), (WAITING, "fp-waiting"))}
        recalled = {r[0] for r in await dedupe.recent(now, 100)}
        sync = database.open_sync_pool(dsn, ttl=60.0)
        try:
            journal = Journal(state, retention=HORIZON, store=PgJournalStore(sync, {"0/1": fence}.get, [(0, 1)]),
                              shard_count=None)
            drained = sorted(journal.take((0, 1)))
            assert journal.state.entries[OPEN].turn() == submit(OPEN)  # the exact submission, run again by its id
            assert journal.state.entries[WAITING].waiting and journal.state.entries[WAITING].payload() is not None
        finally:
            sync.close()
        await leases.release(fence)
        return said, recalled, drained
    finally:
        await pool.close()


def test_the_bridges_memory_moves_once_counted_read_back_and_a_differing_row_is_a_conflict(
        env: dict[str, str], postgres_dsn: str, state_dir: Path, tmp_path: Path) -> None:
    """Four remembered ids (the saved memory's and the journal's) and two open deliveries (an admitted one, a
    waiting one) go to shard 0/1; the closed delivery's lines do not (its id does). The postgres adapters say each
    id is the same message, and a journal on the database drains exactly the two open ones. A second run copies
    nothing; a row changed in the database is a conflict on the next run, and stays as it is."""
    now = time.time()  # the migration reads the system clock: the files are written around it
    asyncio.run(write_files(state_dir, now))
    pg_env = {**env, "CLANKIE_POSTGRES_DSN": postgres_dsn}

    first = cli(pg_env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("\n") == 1  # one summary line, the service's part then the bridge's
    assert first.stdout.startswith("lanes: 0 (0 segments, 0 records copied);")
    assert ("dedupe: 4 ids copied, 0 already there; journal: 2 open deliveries copied (2 lines), 0 already there"
            in first.stdout)
    assert sorted(rows(postgres_dsn, "SELECT message_id, shard, fingerprint, written_epoch FROM clankie_dedupe")) == [
        (OLD, "0/1", fingerprint_key("fp-old"), 1), (CLOSED, "0/1", fingerprint_key("fp-closed"), 1),
        (OPEN, "0/1", fingerprint_key("fp-open"), 1), (WAITING, "0/1", fingerprint_key("fp-waiting"), 1)]
    assert sorted(rows(postgres_dsn, "SELECT op, delivery_id, written_epoch FROM clankie_journal_line")) == [
        ("admit", OPEN, 1), ("wait", WAITING, 1)]
    assert rows(postgres_dsn, "SELECT holder FROM clankie_shard_lease") == [(None,)]  # handed back

    said, recalled, drained = asyncio.run(read_back(postgres_dsn, now, tmp_path / "reader"))
    assert said == {OLD: "same", CLOSED: "same", OPEN: "same", WAITING: "same"}
    assert recalled == {OLD, CLOSED, OPEN, WAITING}
    assert drained == [OPEN, WAITING]

    out: list[str] = []  # the next runs in process, the bridge's part alone (each CLI run starts three Pythons)
    again = migrate_bridge(load(pg_env), out)
    assert again.conflicts == []
    assert out == ["dedupe: 0 ids copied, 4 already there; journal: 0 open deliveries copied (0 lines), 2 already there"]
    assert len(rows(postgres_dsn, "SELECT 1 FROM clankie_dedupe")) == 4
    assert len(rows(postgres_dsn, "SELECT 1 FROM clankie_journal_line")) == 2

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("UPDATE clankie_dedupe SET fingerprint = 7 WHERE message_id = %s", (OLD,))
        conn.execute("UPDATE clankie_journal_line SET line = jsonb_set(line::jsonb, '{fp}', '\"fp-other\"')::json "
                     "WHERE delivery_id = %s", (WAITING,))
    third = migrate_bridge(load(pg_env), [])
    assert third.conflicts == [f"dedupe: message {OLD} differs in the database",
                               f"journal: delivery {WAITING} differs in the database"]
    assert rows(postgres_dsn, f"SELECT fingerprint FROM clankie_dedupe WHERE message_id = '{OLD}'") == [(7,)]
    assert rows(postgres_dsn, f"SELECT line->>'fp' FROM clankie_journal_line WHERE delivery_id = '{WAITING}'") == [
        ("fp-other",)]


def test_a_sharded_bots_ids_go_to_their_rooms_shards_and_an_id_of_no_known_room_is_counted_not_copied(
        env: dict[str, str], postgres_dsn: str, state_dir: Path) -> None:
    """Two shards: each journaled id goes under its room's shard (a direct message's under shard 0), the open
    delivery's lines under its own; the id only the saved memory knows has no room and is counted; an expired id is
    not copied. The migration's clock is a fake one."""
    clock = FakeClock()
    now = clock.wall()
    rooms = {r: Room(guild_id=g, channel_id=c) for r, g, c in (("a", "100", "101"), ("b", str(1 << 22), "102"))}
    assert {room_shard(r, 2)[0] for r in rooms.values()} == {0, 1}, "the two guilds must be on two shards"
    dm = Room(guild_id=None, channel_id="7")

    async def write() -> None:
        memory = Dedupe(retention=RETENTION, horizon=HORIZON, bound=1000)
        journal = Journal(state_dir, retention=HORIZON, remembered=memory, shard_count=2)
        memory.add(OLD, "fp-old", now - 7200 + RETENTION)
        memory.add("1000000000000000000", "fp-gone", now - 1)  # expired by the migration's now
        await journal.compact(now - 100)
        journal.admit(submit("2000000000000000001", rooms["a"]), "fp-a", now - 60, catching_up=False)
        journal.close("2000000000000000001", TurnOutcome.SILENT, now - 59)
        journal.admit(submit("2000000000000000002", rooms["b"]), "fp-b", now - 30, catching_up=False)
        journal.admit(submit("2000000000000000003", dm), "fp-dm", now - 10, catching_up=False)
        journal.aclose()

    asyncio.run(write())
    out: list[str] = []
    report = migrate_bridge(load({**env, "CLANKIE_POSTGRES_DSN": postgres_dsn, "CLANKIE_DISCORD_SHARD_COUNT": "2"}),
                            out, clock)
    assert report.conflicts == []
    assert out == ["dedupe: 3 ids copied, 0 already there, 1 of no known shard not copied; "
                   "journal: 2 open deliveries copied (2 lines), 0 already there"]
    shard_a, shard_b = (f"{room_shard(rooms[r], 2)[0]}/2" for r in "ab")
    assert sorted(rows(postgres_dsn, "SELECT message_id, shard FROM clankie_dedupe")) == [
        ("2000000000000000001", shard_a), ("2000000000000000002", shard_b), ("2000000000000000003", "0/2")]
    assert sorted(rows(postgres_dsn, "SELECT delivery_id, shard FROM clankie_journal_line")) == [
        ("2000000000000000002", shard_b), ("2000000000000000003", "0/2")]


def test_after_the_move_a_postgres_bridge_elsewhere_answers_the_open_delivery_once_and_not_the_remembered_one(
        env: dict[str, str], postgres_dsn: str, tmp_path: Path) -> None:
    """A files-profile bridge (real discord.py on a loopback Discord) admits two messages in two rooms: the first
    its service leaves unanswered (``silent``: nothing in the room refers to it), the second's turn is still running
    when the bridge stops. After the migration, a postgres-profile bridge with a state directory of its own (another
    machine) takes the shard, drains and answers the open one, and reads the quiet room's history back from the
    horizon: the silent one is a duplicate to it. Without the dedupe memory in the database it was admitted and
    submitted again (the test fails so with the dedupe copy taken out)."""
    stuck = asyncio.Event()

    async def first_life(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        if sub.trigger.text.endswith("two"):
            await stuck.wait()  # still thinking when the bridge stops: the delivery stays open in the journal
        return TurnResult.silent(turn_id=f"turn-{sub.delivery_id}")

    fake = FakeDiscord(guilds={GUILD: [CHAN, CHAN2]})

    async def files_life() -> tuple[str, str]:
        async with running(env, script=first_life, fake=fake) as h:
            one = str((await fake.message(CHAN2, "clankie, one", author_id=PERSON))["id"])
            await h.until(lambda: (e := h.app.journal.state.entries.get(one)) is not None and not e.open,
                          what="the first message closed silent")
            two = str((await fake.message(CHAN, "clankie, two", author_id=PERSON))["id"])
            await h.until(lambda: [s.delivery_id for s in h.service.submits] == [one, two], what="the second's turn")
        return one, two

    elsewhere = tmp_path / "elsewhere"
    pg_env = {"CLANKIE_STATE": str(elsewhere / "state"), "CLANKIE_RUNTIME_DIR": str(elsewhere / "run"),
              "HOME": str(elsewhere), "CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": postgres_dsn}

    async def main() -> None:
        one, two = await files_life()
        # the migration runs its own event loops (a worker thread here, as the process it is in production)
        report = await asyncio.to_thread(migrate_bridge, load({**env, "CLANKIE_POSTGRES_DSN": postgres_dsn}), [])
        assert report.conflicts == [] and (report.ids, report.deliveries) == (2, 1)
        assert rows(postgres_dsn, f"SELECT shard FROM clankie_dedupe WHERE message_id = '{one}'") == [("0/1",)]
        async with running(pg_env, fake=fake) as h:
            await h.until(lambda: len(fake.posts_in(CHAN)) == 1, what="the open delivery answered")
            await h.until(lambda: h.app.recovered.rooms >= 1, what="the quiet room's history read back")
            assert h.app.recovered.fetched >= 1 and h.app.recovered.admitted == 0
            assert [s.delivery_id for s in h.service.submits] == [two]  # not one: the database remembered it
        assert fake.posts_in(CHAN2) == []

    asyncio.run(main())


def test_a_shard_held_by_a_running_tree_refuses_the_bridges_part_and_nothing_is_written(
        env: dict[str, str], postgres_dsn: str, state_dir: Path) -> None:
    """The journal's shard is another tree's (a live lease): the run is refused whole, no row is written, and the
    tree's lease is left as it was."""
    clock = FakeClock()
    asyncio.run(write_files(state_dir, clock.wall()))
    database.prepare(postgres_dsn)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO clankie_shard_lease (shard, holder, epoch, expires_at) "
                     "VALUES ('0/1', 'a-tree', 4, now() + interval '1 hour')")
    out: list[str] = []
    report = migrate_bridge(load({**env, "CLANKIE_POSTGRES_DSN": postgres_dsn}), out, clock)
    assert report.conflicts == ["shards held by a running tree: 0/1 (stop it, then migrate)"] and out == []
    assert rows(postgres_dsn, "SELECT count(*) FROM clankie_dedupe") == [(0,)]
    assert rows(postgres_dsn, "SELECT count(*) FROM clankie_journal_line") == [(0,)]
    assert rows(postgres_dsn, "SELECT holder, epoch FROM clankie_shard_lease") == [("a-tree", 4)]
