"""Two real trees on one PostgreSQL (issue 34): a dead tree's shard is taken by the other, and its room's memory with it.

Both trees run ``clankie run`` in the postgres profile on the same shard (``0/1``: each prefers it) against one
loopback Discord; each has its own model double. The first to take the shard's lease serves it; the other's bridge
waits for the lease without an IDENTIFY (a standby). SIGKILL of the serving tree's supervisor (its children die with
it, as with the machine) leaves its lease to expire on the database's clock; the standby takes the shard at the next
epoch, opens its gateway, reads the gap back, and answers the room with what the room told the dead tree: the lane's
session tree is in the database, not on the dead machine's disk.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import psycopg
import pytest

from clankie.store.leases import tree_holder
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_discord import FakeDiscord
from tests.integration.tree import CHAN, GUILD, PERSON, pg_tree
from tests.postgres import lease_row, postgres_cluster, postgres_dsn

__all__ = ["postgres_cluster", "postgres_dsn"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

LEASES = {"CLANKIE_LEASE_RENEW_SECONDS": "0.5", "CLANKIE_LEASE_TTL_SECONDS": "2.5"}  # the least TTL allowed, and a bit


def taken_from(dsn: str) -> object:
    """Whose expired lease the shard was last taken over from."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT taken_from FROM clankie_shard_lease WHERE shard = '0/1'").fetchone()
        return None if row is None else row[0]


def test_a_killed_trees_room_is_answered_by_the_standby_tree_with_what_it_was_told(tmp_path: Path,
                                                                                   postgres_dsn: str) -> None:
    """Tree A serves and is told a door code; tree B stands by. SIGKILL of A (every process): B takes the shard at
    epoch 2 and answers the room's next question with the code, from the lane A wrote to the database. A comes back
    as the standby and B dies: A takes the shard back and answers the next question once, running nothing again."""

    async def main() -> None:
        discord = FakeDiscord(guilds={GUILD: [CHAN]})
        await discord.start()
        try:
            async with pg_tree(tmp_path / "a", discord, postgres_dsn, serving=True, spares=False, hosts=False, env=LEASES) as a:
                a.anthropic.script(fa.text("noted"))
                told = await a.ask("clankie, remember: the door code is 4711", 60)
                assert told.content == "noted"
                assert lease_row(postgres_dsn) == (tree_holder(a.state), 1)
                async with pg_tree(tmp_path / "b", discord, postgres_dsn, serving=False, spares=False, hosts=False, env=LEASES) as b:
                    assert discord.identifies == 1  # the standby opened no gateway session
                    b.anthropic.script(fa.text("it is 4711"))
                    await a.kill_supervisor()  # the machine dies: its children with it, its lease left to expire
                    asked = await discord.message(CHAN, "clankie, what is the door code?", author_id=PERSON)
                    answer = await b.reply_to(str(asked["id"]), 90)
                    assert answer.content == "it is 4711"
                    seen = json.dumps(b.anthropic.requests[-1]["messages"])
                    assert "remember: the door code is 4711" in seen and "noted" in seen  # A's lane, from the database
                    assert len(b.anthropic.requests) == 1  # the question alone: A's answered message not run again
                    assert lease_row(postgres_dsn) == (tree_holder(b.state), 2)
                    assert taken_from(postgres_dsn) == tree_holder(a.state)  # a takeover, and from whom
                    bridge = await b.wait_child(lambda c: "last takeover" in c.detail, "bridge")
                    assert f"last takeover: 0/1 from {tree_holder(a.state)}" in bridge.detail
                    assert [p.content for p in discord.posts_in(CHAN)] == ["noted", "it is 4711"]

                    # A's machine comes back, as the standby; then B dies: A takes the shard back (epoch 3) and
                    # RESUMEs the shard's session as B left it in the database: from the sequence B journaled, so
                    # Discord replays nothing B answered
                    a.anthropic.script(fa.text("it is still 4711"))
                    await a.respawn()
                    await a.standing_by(90)
                    await b.kill_supervisor()
                    again = await discord.message(CHAN, "clankie, the code once more?", author_id=PERSON)
                    assert (await a.reply_to(str(again["id"]), 90)).content == "it is still 4711"
                    assert lease_row(postgres_dsn) == (tree_holder(a.state), 3)
                    assert taken_from(postgres_dsn) == tree_holder(b.state)
                    assert len(a.anthropic.requests) == 2  # the question alone: nothing B answered is run again
                    assert discord.identifies == 1  # every takeover RESUMEd the one session A started
                    assert [p.content for p in discord.posts_in(CHAN)] == ["noted", "it is 4711", "it is still 4711"]
        finally:
            await discord.close()

    asyncio.run(main())
