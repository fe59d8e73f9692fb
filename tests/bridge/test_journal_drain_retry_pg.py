"""A taken shard's journal drain is tried again when the database did not answer its read (bridge/app.py ``_taken``,
``_drain_again``; bridge/recovery.py ``drain_shard``), on a real PostgreSQL with a real bridge (discord.py on the
loopback Discord): the delivery a dead tree left open is answered once the database answers again, once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psycopg
import pytest

from bridge.journal import Journal
from clankie.protocol import Author, Room, Trigger, TurnSubmit
from clankie.store import database
from clankie.store.journal_pg import PgJournalStore
from clankie.store.leases import Fence, PgLeases
from clankie.testing.fake_discord import FakeDiscord
from tests.bridge.harness import CHAN, GUILD, running
from tests.postgres import postgres_cluster, postgres_dsn

__all__ = ["postgres_cluster", "postgres_dsn"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

LEFT_OPEN = "1300000000000000001"


async def a_dead_tree_leaves_an_open_delivery(dsn: str, state: Path) -> None:
    """Another tree held shard 0/1 (epoch 1), admitted a message into the journal in the database, and died: its
    lease is then freed (as at its expiry)."""
    pool = await database.open_pool(dsn, ttl=60.0)
    sync = database.open_sync_pool(dsn, ttl=60.0)
    try:
        leases = PgLeases(pool)
        epoch = await leases.acquire("0/1", "dead-tree", 600.0)
        assert epoch == 1
        fence = Fence("0/1", "dead-tree", epoch)
        journal = Journal(state, retention=900.0, store=PgJournalStore(sync, {"0/1": fence}.get, [(0, 1)]))
        trigger = Trigger(message_id=LEFT_OPEN, author=Author(id="5", name="p"), text="clankie, still there?",
                          at=time.time() - 5)
        journal.admit(TurnSubmit(delivery_id=LEFT_OPEN, room=Room(guild_id=GUILD, channel_id=CHAN), trigger=trigger),
                      "fp-left-open", time.time() - 5, catching_up=False)
    finally:
        sync.close()
        await pool.close()


def test_a_drain_whose_read_failed_is_tried_again_and_answers_the_open_delivery_once(
        env: dict[str, str], postgres_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The bridge waits for the shard a dead tree holds; its journal's connection to the database is cut meanwhile
    (the server ends it). When the lease is freed the bridge takes the shard and its first read of the shard's lines
    fails (``database_unavailable``): the drain is tried again a renew period later, on a new connection, and the
    delivery the dead tree left open is submitted and answered, once."""
    database.prepare(postgres_dsn)
    pg_env = {**env, "CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": postgres_dsn,
              "CLANKIE_LEASE_RENEW_SECONDS": "0.5", "CLANKIE_LEASE_TTL_SECONDS": "2.5"}

    async def main() -> None:
        await a_dead_tree_leaves_an_open_delivery(postgres_dsn, tmp_path / "dead")
        async with running(pg_env, fake=FakeDiscord(guilds={GUILD: [CHAN]}), wait_connected=False) as h:
            await h.until(lambda: h.app.discord_status == "waiting for the shard lease", what="the bridge waiting")
            pool = h.app._journal_pool  # the journal's own pool: its one connection is cut by the server
            assert pool is not None
            with pool.connection() as conn:
                pid = conn.info.backend_pid
            with psycopg.connect(postgres_dsn, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                admin.execute("UPDATE clankie_shard_lease SET holder = NULL, expires_at = '-infinity'")  # freed
            await h.until(lambda: "shard 0/1 not drained (database_unavailable); trying again" in caplog.text,
                          what="the first read refused")
            await h.until(lambda: (e := h.app.journal.state.entries.get(LEFT_OPEN)) is not None and not e.open,
                          timeout=30, what="the open delivery drained and answered")
            assert [s.delivery_id for s in h.service.submits] == [LEFT_OPEN]
            assert len(h.fake.posts_in(CHAN)) == 1

    asyncio.run(main())
    assert caplog.text.count("not drained") == 1
