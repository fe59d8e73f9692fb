"""Two real trees on one PostgreSQL with ``CLANKIE_DISCORD_SHARD_TAKEOVER=any`` (issue 34): a dead tree's shard is
served by the other tree, which does not prefer it, and handed back when its own tree returns.

Tree A prefers shard 0 of 2, tree B shard 1; both may take any shard whose lease is free or expired. Guild G0 is on
shard 0, G1 on shard 1. A starts alone and serves both shards (shard 1 is free); B's start claims shard 1 and A hands
it back. A is told a door code in G0 and dies with every process: B takes shard 0 at its lease's expiry, RESUMEs A's
session of it and answers the room with the code, from the lane A wrote to the database, while answering G1 as
before. A comes back: it claims shard 0, B hands it back (its gateway stops running shard 0, its open deliveries end,
its lease is released), and A RESUMEs the session B left. A question asked as A comes back is answered once, by
whichever tree holds the shard when it arrives; nothing is lost, nothing answered twice, and no handback or takeover
costs a session start.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from clankie.shards import shard_of
from clankie.store.leases import tree_holder
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_discord import FakeDiscord
from clankie.testing.fake_discord_records import Post
from tests.integration.tree import PERSON, Tree, pg_tree
from tests.polling import until
from tests.postgres import lease_row, postgres_cluster, postgres_dsn

__all__ = ["postgres_cluster", "postgres_dsn"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

G0, G1 = str(1000 << 22), str(1001 << 22)
C0, C1 = "4194304101", "4194304201"
LEASES = {"CLANKIE_LEASE_RENEW_SECONDS": "0.5", "CLANKIE_LEASE_TTL_SECONDS": "2.5"}


def shard_env(prefers: str) -> dict[str, str]:
    return {**LEASES, "CLANKIE_DISCORD_GUILD_IDS": f"{G0},{G1}", "CLANKIE_DISCORD_SHARD_COUNT": "2",
            "CLANKIE_DISCORD_SHARD_IDS": prefers, "CLANKIE_DISCORD_SHARD_TAKEOVER": "any"}


def replies_to(discord: FakeDiscord, channel: str, message_id: str) -> list[Post]:
    return [p for p in discord.posts_in(channel) if str((p.message_reference or {}).get("message_id")) == message_id]


def closed_by(trees: list[Tree], message_id: str) -> list[str]:
    """The outcome each tree closed ``message_id``'s delivery with (one tree's, once it is closed)."""
    return [closing["outcome"] for t in trees if (closing := t.outcome_of(message_id)) is not None]


async def serving(t: Tree, shards: str) -> None:
    """Until the tree's bridge runs the gateway on exactly ``shards`` (its status line's leases)."""
    await t.wait_child(lambda c: "discord: connected" in c.detail and c.detail.count(" held") == len(shards.split(","))
                       and all(f"{s}/2 held" in c.detail for s in shards.split(",")), "bridge", 60)


def test_a_dead_trees_shard_is_served_by_the_other_tree_and_handed_back_when_it_returns(tmp_path: Path,
                                                                                     postgres_dsn: str) -> None:
    assert (shard_of(G0, 2), shard_of(G1, 2)) == (0, 1)

    async def main() -> None:
        discord = FakeDiscord(guilds={G0: [C0], G1: [C1]}, shards=2)
        await discord.start()
        try:
            async with contextlib.AsyncExitStack() as stack:
                a = await stack.enter_async_context(pg_tree(tmp_path / "a", discord, postgres_dsn, serving=True, spares=False, hosts=False,
                                                            env=shard_env("0")))
                b = await stack.enter_async_context(pg_tree(tmp_path / "b", discord, postgres_dsn, serving=True, spares=False, hosts=False,
                                                            env=shard_env("1")))
                # B claimed its shard from A (which took it while it was free) and A handed it back
                await until(lambda: lease_row(postgres_dsn, "1/2") == (tree_holder(b.state), 2), 30, "shard 1 B's")
                assert lease_row(postgres_dsn, "0/2") == (tree_holder(a.state), 1)
                await serving(a, "0")
                await serving(b, "1")

                a.anthropic.script(fa.text("noted"))
                told = await discord.message(C0, "clankie, remember: the door code is 4711", author_id=PERSON)
                assert (await a.reply_to(str(told["id"]), 60)).content == "noted"

                # A's machine dies: B takes shard 0 at its lease's expiry and serves both
                b.anthropic.script(fa.text("it is 4711"), fa.text("hello G1"))
                await a.kill_supervisor()
                asked = await discord.message(C0, "clankie, what is the door code?", author_id=PERSON)
                assert (await b.reply_to(str(asked["id"]), 90)).content == "it is 4711"
                assert "remember: the door code is 4711" in str(b.anthropic.requests[-1]["messages"])
                assert lease_row(postgres_dsn, "0/2") == (tree_holder(b.state), 2)
                bridge = await b.wait_child(lambda c: "0/2 held for another tree" in c.detail, "bridge")
                assert "1/2 held (epoch 2)" in bridge.detail
                hello = await discord.message(C1, "clankie, hello", author_id=PERSON)
                assert (await b.reply_to(str(hello["id"]), 60)).content == "hello G1"

                # A comes back and claims shard 0; a question asked meanwhile is answered once, by one of the two
                a.anthropic.script(fa.text("A: it is 4711"), fa.text("A: still 4711"))
                b.anthropic.script(fa.text("B: it is 4711"))
                await a.respawn()
                meanwhile = await discord.message(C0, "clankie, the code again?", author_id=PERSON)
                await until(lambda: lease_row(postgres_dsn, "0/2") == (tree_holder(a.state), 3), 60, "shard 0 back")
                await until(lambda: replies_to(discord, C0, str(meanwhile["id"])), 60, "the question answered")
                await serving(a, "0")
                await serving(b, "1")
                last = await discord.message(C0, "clankie, and now?", author_id=PERSON)
                assert (await a.reply_to(str(last["id"]), 60)).content.startswith("A: ")  # A's again
                assert closed_by([b], str(last["id"])) == []  # B no longer hears shard 0
                assert closed_by([a, b], str(meanwhile["id"])) == ["settled"]  # by one tree, once
                assert len(replies_to(discord, C0, str(meanwhile["id"]))) == 1
                assert len(replies_to(discord, C0, str(last["id"]))) == 1
                answered = [str((p.message_reference or {}).get("message_id")) for p in discord.posts_in(C0)]
                assert len(answered) == len(set(answered)) == 4  # four questions, four replies, none twice
                assert discord.identifies == 2  # A's first start of each shard; every move after RESUMEd
                assert lease_row(postgres_dsn, "1/2") == (tree_holder(b.state), 2)
        finally:
            await discord.close()

    asyncio.run(main())
