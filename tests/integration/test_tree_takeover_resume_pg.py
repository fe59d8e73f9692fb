"""Two real trees on one PostgreSQL (issue 34, "Takeover"): the tree that takes a dead tree's shard RESUMEs the dead
tree's gateway session, and Discord replays to it what was said while nobody held the shard.

Tree A serves shard ``0/1``; tree B stands by. A's bridge keeps the shard's gateway session in the database (session
id, resume URL, the sequence of the last event A journaled), fenced by A's lease. SIGKILL of A's supervisor (every
process of the tree dies, as with the machine) leaves the session resumable on Discord (no close frame) and A's lease
to expire. A person speaks while no tree holds the shard. B takes the lease at the next epoch, adopts the session
from the database and RESUMEs it, with no IDENTIFY: Discord replays the message, and B answers it, once. The ids A
admitted are in the database too: a message A answered, delivered again, is a duplicate to B.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from clankie.store.leases import tree_holder
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_discord import FakeDiscord
from tests.integration.tree import CHAN, GUILD, PERSON, Tree, pg_tree
from tests.polling import until
from tests.postgres import lease_row, postgres_cluster, postgres_dsn

__all__ = ["postgres_cluster", "postgres_dsn"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

# renewed often, and a TTL long enough that the dead tree's lease surely outlives the test's look at the empty gateway
LEASES = {"CLANKIE_LEASE_RENEW_SECONDS": "0.5", "CLANKIE_LEASE_TTL_SECONDS": "5"}


def session(dsn: str) -> tuple[str, int | None, int] | None:
    """The shard's gateway session as the database keeps it: (session id, sequence, the epoch it was written at)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT session_id, seq, written_epoch FROM clankie_gateway_session "
                           "WHERE shard = '0/1'").fetchone()
    return None if row is None else (str(row[0]), None if row[1] is None else int(row[1]), int(row[2]))


def sequenced(dsn: str) -> tuple[str, int, int] | None:
    """The shard's stored session once it has a journaled sequence, else None."""
    row = session(dsn)
    return None if row is None or row[1] is None else (row[0], row[1], row[2])


def outcomes(tree: Tree, delivery_id: str) -> list[str]:
    """What ``tree``'s bridge recorded of one message (``deduplicated``, ``settled``, ...), in order."""
    return [r["outcome"] for r in tree.receipts() if r.get("delivery_id") == delivery_id]


def test_the_taking_tree_resumes_the_dead_trees_session_and_answers_what_was_said_meanwhile_once(
        tmp_path: Path, postgres_dsn: str) -> None:
    """A serves and answers; B stands by. A's tree is SIGKILLed; a message is said while no tree holds the shard. B
    takes the shard at epoch 2 and RESUMEs A's session (the one A stored, no new IDENTIFY); Discord replays the
    message to B alone, B answers it once, and moves the stored sequence past it under its own epoch. A's answered
    message, delivered again by Discord, is a duplicate to B (A admitted it: the id is the shard's memory)."""

    async def main() -> None:
        discord = FakeDiscord(guilds={GUILD: [CHAN]})
        await discord.start()
        try:
            async with pg_tree(tmp_path / "a", discord, postgres_dsn, serving=True, spares=False, hosts=False, env=LEASES) as a:
                a.anthropic.script(fa.text("A here"))
                asked = await discord.message(CHAN, "clankie, who is there?", author_id=PERSON)
                first = await a.reply_to(str(asked["id"]), 60)
                assert first.content == "A here"
                # A's session is in the database, its sequence moved past the message A journaled
                stored = await until(lambda: sequenced(postgres_dsn), 30, "A's session and sequence in the database")
                a_session = stored[0]
                assert stored[2] == 1 and lease_row(postgres_dsn) == (tree_holder(a.state), 1)
                async with pg_tree(tmp_path / "b", discord, postgres_dsn, serving=False, spares=False, hosts=False, env=LEASES) as b:
                    assert discord.identifies == 1  # the standby opened no gateway session
                    b.anthropic.script(fa.text("B here"))
                    await a.kill_supervisor()  # the machine dies: its children with it, its lease left to expire
                    await until(lambda: discord.connected == 0, 30, "A's gateway socket gone")
                    assert lease_row(postgres_dsn) == (tree_holder(a.state), 1)  # not expired yet: nobody may take it

                    said = await discord.message(CHAN, "clankie, anyone left?", author_id=PERSON)
                    assert discord.delivered_to(str(said["id"])) == []  # said while no tree holds the shard

                    answer = await b.reply_to(str(said["id"]), 90)
                    assert answer.content == "B here"
                    assert lease_row(postgres_dsn) == (tree_holder(b.state), 2)
                    assert list(discord.resumed) == [a_session]  # B RESUMEd the dead tree's session ...
                    assert discord.identifies == 1  # ... and started none of its own
                    assert discord.delivered_to(str(said["id"])) == [None]  # replayed once, to B
                    assert len(b.anthropic.requests) == 1  # the replayed message alone; nothing of A's run again
                    assert [p.content for p in discord.posts_in(CHAN)] == ["A here", "B here"]
                    # the session goes on as the shard's: B journaled the replayed message and moved the sequence
                    await until(lambda: (row := session(postgres_dsn)) is not None and row[2] == 2, 30,
                                "the sequence B journaled, written under B's epoch")
                    kept = sequenced(postgres_dsn)
                    assert kept is not None and kept[0] == a_session and kept[1] > stored[1]

                    await discord.redeliver(asked)  # Discord sends A's answered message again, now to B
                    await until(lambda: "deduplicated" in outcomes(b, str(asked["id"])), 30,
                                "B recognising the message A admitted")
                    assert len(b.anthropic.requests) == 1
                    assert [p.content for p in discord.posts_in(CHAN)] == ["A here", "B here"]
        finally:
            await discord.close()

    asyncio.run(main())
