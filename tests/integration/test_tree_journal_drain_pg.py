"""Two real trees on one PostgreSQL (issue 34): a dead tree's admitted, unanswered message is drained from the journal in
the database by the tree that takes its shard, and answered once.

Tree A serves the shard (``0/1``) and admits a message whose turn is stuck: A's model double holds every answer. A's
bridge wrote the delivery's ``admit`` line to the database, fenced by its lease (epoch 1). SIGKILL of A's supervisor
(its children die with it, as with the machine) leaves the lease to expire; tree B, the standby, takes the shard at
epoch 2, reads the shard's journal lines, finds the delivery open, checks the room's history for a reply A may have
posted (none), and submits it to its own service: one post, and one ``close`` line in the journal, written by B.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_discord import FakeDiscord
from tests.integration.tree import CHAN, GUILD, PERSON, pg_tree
from tests.polling import until
from tests.postgres import postgres_cluster, postgres_dsn

__all__ = ["postgres_cluster", "postgres_dsn"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

LEASES = {"CLANKIE_LEASE_RENEW_SECONDS": "0.5", "CLANKIE_LEASE_TTL_SECONDS": "2.5"}  # the least TTL allowed, and a bit


def journal_of(dsn: str, delivery_id: str) -> list[tuple[str, int]]:
    """The journal lines of one delivery in the database, in write order: (op, the epoch they were written at)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT op, written_epoch FROM clankie_journal_line WHERE delivery_id = %s ORDER BY id",
                            (delivery_id,)).fetchall()
    return [(str(r[0]), int(str(r[1]))) for r in rows]


def _once_closed(journal: list[tuple[str, int]]) -> list[tuple[str, int]] | None:
    """The journal once it holds a close line (None before): what is asserted is then the whole of it."""
    return journal if any(op == "close" for op, _ in journal) else None


def test_a_dead_trees_stuck_message_is_drained_and_answered_once_by_the_tree_that_takes_its_shard(
        tmp_path: Path, postgres_dsn: str) -> None:
    async def main() -> None:
        discord = FakeDiscord(guilds={GUILD: [CHAN]})
        await discord.start()
        try:
            async with pg_tree(tmp_path / "a", discord, postgres_dsn, serving=True, spares=False, hosts=False, env=LEASES) as a:
                a.anthropic.gate = asyncio.Event()  # A's model never answers: its turn is stuck
                try:
                    async with pg_tree(tmp_path / "b", discord, postgres_dsn, serving=False, spares=False, hosts=False, env=LEASES) as b:
                        b.anthropic.script(fa.text("here I am"))
                        asked = await discord.message(CHAN, "clankie, are you there?", author_id=PERSON)
                        did = str(asked["id"])
                        await a.anthropic.wait_for_requests(1)  # admitted, journaled, submitted, at the model
                        assert journal_of(postgres_dsn, did) == [("admit", 1)]
                        await a.kill_supervisor()  # the machine dies holding the turn; its lease is left to expire

                        answer = await b.reply_to(did, 90)
                        assert answer.content == "here I am"
                        assert [p.content for p in discord.posts_in(CHAN)] == ["here I am"]  # one post
                        assert len(b.anthropic.requests) == 1
                        # drained from the journal (not found again by the history read-back), closed once, by B
                        assert [r["outcome"] for r in b.receipts() if r.get("delivery_id") == did][:1] == ["recovered"]
                        closing = b.outcome_of(did)
                        assert closing is not None and closing["outcome"] == "settled"
                        # the close line is synced soon after the outcome (Journal.close), not before its receipt
                        journal = await until(lambda: _once_closed(journal_of(postgres_dsn, did)), 30,
                                              "B's close line in the journal", step=0.1)
                        assert journal == [("admit", 1), ("close", 2)]
                finally:
                    a.anthropic.gate.set()
        finally:
            await discord.close()

    asyncio.run(main())
