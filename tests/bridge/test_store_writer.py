"""The bridge's writer of its durable memory in the postgres profile (bridge/store_writer.py), on a real PostgreSQL:
every change lands in the order made while the shard is the tree's, each under the fence it was made with; a change
the lease no longer covers is refused, counted and dropped, and the bridge goes on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from bridge import gateway_link as gl
from bridge.dedupe import Dedupe, Seen
from bridge.gateway_session import SessionKeeper
from bridge.store_writer import StoreWriter
from clankie.store import database
from clankie.store.bridge_pg import PgDedupe, PgGatewaySessions
from clankie.store.leases import TRANSIENT, Fence, PgLeases
from clankie.store.ports import SessionRecord, fingerprint_key
from clankie.testing.clock import FakeClock
from tests.postgres import postgres_cluster, postgres_dsn

__all__ = ["postgres_cluster", "postgres_dsn"]

SHARD = (0, 1)
SESSION = SessionRecord("5f1c0ffee", "wss://gateway.example/", 7, 1_800_000_000.0)


@dataclass
class Tree:
    """One tree's view of its leases (what ``ShardLeases.fence_for`` gives the bridge) and its writer."""

    leases: PgLeases
    fences: dict[str, Fence] = field(default_factory=dict)
    writer: StoreWriter | None = None

    async def take(self, holder: str = "tree-a") -> Fence:
        epoch = await self.leases.acquire("0/1", holder, 600.0)
        assert epoch is not None
        self.fences["0/1"] = fence = Fence("0/1", holder, epoch)
        return fence

    @property
    def store(self) -> StoreWriter:
        assert self.writer is not None
        return self.writer


@asynccontextmanager
async def tree(dsn: str, bound: int = 4096) -> AsyncIterator[Tree]:
    database.prepare(dsn)
    pool = await database.open_pool(dsn, ttl=600.0)
    try:
        t = Tree(PgLeases(pool))
        t.writer = StoreWriter(lambda fence_for: PgGatewaySessions(t.leases, fence_for),
                               lambda shard, fence_for: PgDedupe(t.leases, shard, fence_for), t.fences.get,
                               FakeClock(), transient=TRANSIENT, retry=0.0, bound=bound)
        yield t
    finally:
        await pool.close()


def take_away(dsn: str) -> None:
    """Another tree takes the shard (as after this one's pause past its lease)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(b"UPDATE clankie_shard_lease SET holder = 'elsewhere', epoch = epoch + 1, "
                     b"expires_at = now() + interval '1 hour' WHERE shard = '0/1'")


def test_changes_land_in_order_and_a_moving_sequence_is_one_write(postgres_dsn: str) -> None:
    """A new session, its sequence moved twice, an admitted id: three writes, read back as made (by any tree)."""

    async def main() -> None:
        async with tree(postgres_dsn) as t:
            await t.take()
            t.store.save(SHARD, SESSION)
            t.store.advance(SHARD, 9)
            t.store.advance(SHARD, 12)
            t.store.retain(SHARD, "1234", "fp", 1_900_000_000.0)
            t.store.advance(SHARD, 13)
            assert len(t.store.pending) == 3  # the two moves before the id fold into the session they follow
            await t.store.write_pending()
            assert (t.store.written, t.store.refused, t.store.dropped) == (3, 0, 0)
        async with tree(postgres_dsn) as other:  # another tree (or this one's next process) reads what landed
            assert await other.store.load(SHARD) == SessionRecord(SESSION.session_id, SESSION.resume_url, 13,
                                                                 SESSION.since)
            assert await other.store.recent(SHARD, 1_800_000_000.0, 10) == [("1234", fingerprint_key("fp"), 1_900_000_000.0)]

    asyncio.run(main())


def test_a_change_after_the_shard_was_taken_is_refused_counted_and_dropped_and_the_writer_goes_on(
        postgres_dsn: str) -> None:
    """The lease taken by another tree: a change made with the old fence is refused by the database (counted in the
    leases' stale writes), raises nothing, and leaves the other tree's view alone; the writer writes on."""

    async def main() -> None:
        async with tree(postgres_dsn) as t:
            await t.take()
            t.store.save(SHARD, SESSION)
            await t.store.write_pending()
            take_away(postgres_dsn)
            t.store.advance(SHARD, 99)
            t.store.retain(SHARD, "4321", "fp", 1_900_000_000.0)
            await t.store.write_pending()
            assert (t.store.written, t.store.refused) == (1, 2) and t.leases.stale_writes == 2
            assert await t.store.load(SHARD) == SESSION
            assert await t.store.recent(SHARD, 0.0, 10) == []

    asyncio.run(main())


def test_a_change_made_in_one_tenure_is_not_written_in_the_next(postgres_dsn: str) -> None:
    """A change carries the fence its shard had when it was made: the lease lost and taken again (a new epoch)
    before it was written, it is refused, never written as the new tenure's."""

    async def main() -> None:
        async with tree(postgres_dsn) as t:
            first = await t.take()
            t.store.save(SHARD, SESSION)
            await t.leases.release(first)
            await t.take()  # the same tree, a new tenure: epoch 2
            await t.store.write_pending()
            assert (t.store.written, t.store.refused) == (0, 1)
            assert await t.store.load(SHARD) is None

    asyncio.run(main())


def test_a_change_for_a_shard_the_tree_does_not_serve_is_refused_before_the_database(postgres_dsn: str) -> None:
    """No fence (the shard is not this tree's now): refused without a statement, not counted as a stale write."""

    async def main() -> None:
        async with tree(postgres_dsn) as t:
            t.store.retain(SHARD, "1234", "fp", 1_900_000_000.0)
            await t.store.write_pending()
            assert (t.store.written, t.store.refused, t.leases.stale_writes) == (0, 1, 0)

    asyncio.run(main())


def test_past_its_bound_a_new_change_is_dropped_and_counted(postgres_dsn: str) -> None:
    """The queue never grows past its bound: a database too slow for the bridge costs changes, counted, not memory."""

    async def main() -> None:
        async with tree(postgres_dsn, bound=2) as t:
            await t.take()
            for i in range(3):
                t.store.retain(SHARD, str(1000 + i), "fp", 1_900_000_000.0)
            assert (len(t.store.pending), t.store.dropped) == (2, 1)

    asyncio.run(main())


def test_the_keeper_writes_each_session_change_and_a_taking_tree_adopts_the_session_as_its_holder_left_it(
        tmp_path: Path, postgres_dsn: str) -> None:
    """Tree A's keeper: READY saves the session, a journaled sequence is written when the keeper flushes it (not
    before). A lets the shard go; tree B takes it and adopts A's session with A's sequence, in place of what its own
    file held (nothing): it will RESUME. B's RESUME refused, its IDENTIFY gives the session up in the database too."""

    async def main() -> None:
        clock = FakeClock()
        async with tree(postgres_dsn) as a, tree(postgres_dsn) as b:
            fence = await a.take("tree-a")
            keeper_a = SessionKeeper(tmp_path / "a", clock)
            keeper_a.mirror = a.store
            keeper_a.link(SHARD).move(gl.Move.IDENTIFY)
            keeper_a.ready(SHARD, "a-session", "wss://gateway.example/", 3)
            keeper_a.journaled(SHARD, 8)  # within FLUSH_EVERY of the last write: kept for the next flush
            await a.store.write_pending()
            assert (await a.store.load(SHARD) or SESSION).seq == 3
            keeper_a.tick()  # the heartbeat's flush: the journaled sequence, to the file and the database alike
            await a.store.write_pending()
            assert (await a.store.load(SHARD) or SESSION).seq == 8
            await a.leases.release(fence)

            await b.take("tree-b")
            keeper_b = SessionKeeper(tmp_path / "b", clock)
            keeper_b.mirror = b.store
            assert keeper_b.stored(SHARD) is None  # B's own file: nothing
            await keeper_b.adopt([SHARD])
            assert keeper_b.stored(SHARD) == gl.Stored("a-session", "wss://gateway.example/", 8, clock.wall())
            keeper_b.resuming(SHARD)
            await keeper_b.identifying(SHARD)  # Discord refused the RESUME: a new session follows
            await b.store.write_pending()
            assert await b.store.load(SHARD) is None and b.store.refused == 0

    asyncio.run(main())


def test_ids_another_holder_admitted_are_recalled_as_the_same_message() -> None:
    """What the database hands back (the fingerprint's 64 bits signed) is a duplicate to the memory, a changed body a
    conflict; what is not among them is new."""
    memory = Dedupe(retention=3600.0, horizon=900.0, bound=100)
    rows = [("1002", fingerprint_key("b"), 2000.0), ("1001", fingerprint_key("a"), 2000.0),
            ("x-1", fingerprint_key("c"), 2000.0)]
    assert memory.recall(rows) == 3
    assert memory.check("1001", "a", 1000.0) is Seen.SAME
    assert memory.check("1002", "changed", 1000.0) is Seen.CONFLICT
    assert memory.check("x-1", "c", 1000.0) is Seen.SAME
    assert memory.check("1003", "d", 1000.0) is Seen.NEW
