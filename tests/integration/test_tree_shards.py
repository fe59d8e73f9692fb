"""Two real trees, one Discord: each runs one shard of two and answers only its own guilds (issue 13).

Both trees are full `clankie run` process trees with their own state and
runtime dirs and their own fake Anthropic, connected with the same bot token
to ONE fake Discord. Tree A runs shard 0 of 2, tree B shard 1 of 2; both allow
both guilds, so only sharding decides who hears what. The guild ids are chosen
so that ``(guild_id >> 22) % 2`` puts one guild on each shard; direct messages
belong to shard 0, so only tree A hears the owner's DM.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clankie.shards import shard_of
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_discord import FakeDiscord
from tests.integration.tree import PERSON, Tree, tree_on

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

G0, G1 = str(1000 << 22), str(1001 << 22)
C0, C1 = "4194304101", "4194304201"
OWNER = "900000000000000002"  # the fake application's owner: DMs from them are admitted (owner_only)


@contextlib.asynccontextmanager
async def shard_tree(tmp: Path, runtime: Path, discord: FakeDiscord, shard_ids: str) -> AsyncIterator[Tree]:
    """`clankie run` on shards ``shard_ids`` of 2, against the shared fake Discord and a fake Anthropic of its own."""
    extra = {"CLANKIE_DISCORD_GUILD_IDS": f"{G0},{G1}", "CLANKIE_DISCORD_SHARD_COUNT": "2",
             "CLANKIE_DISCORD_SHARD_IDS": shard_ids}
    async with tree_on(tmp, runtime, discord, extra, lambda t: t.ready(90), spares=False, hosts=False) as t:
        yield t


def seen_by_model(t: Tree) -> str:
    return "\n".join(str(body.get("messages")) for body in t.anthropic.requests)


def test_two_trees_on_two_shards_each_answer_only_their_own_guilds(tmp_path: Path) -> None:
    """Shard 0's tree answers guild G0 and the owner's DM; shard 1's tree answers G1; neither hears the other's."""
    assert (shard_of(G0, 2), shard_of(G1, 2)) == (0, 1)

    async def main() -> None:
        discord = FakeDiscord(guilds={G0: [C0], G1: [C1]}, shards=2)
        await discord.start()
        try:
            async with contextlib.AsyncExitStack() as stack:
                rt_a, rt_b = (Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ck-", dir="/tmp")))
                              for _ in range(2))  # short: socket paths must fit in 107 bytes
                rt_a.chmod(0o700)
                rt_b.chmod(0o700)
                a = await stack.enter_async_context(shard_tree(tmp_path / "a", rt_a, discord, "0"))
                b = await stack.enter_async_context(shard_tree(tmp_path / "b", rt_b, discord, "1"))
                assert sorted(discord.shards_connected(), key=str) == [(0, 2), (1, 2)]
                assert (await a.child("bridge")).detail.endswith("shards: 0/2")
                assert (await b.child("bridge")).detail.endswith("shards: 1/2")

                a.anthropic.script(fa.text("Shard zero here."), fa.text("Shard zero, privately."))
                b.anthropic.script(fa.text("Shard one here."))
                to_a = await discord.message(C0, "clankie, who answers guild zero?", author_id=PERSON)
                to_b = await discord.message(C1, "clankie, who answers guild one?", author_id=PERSON)
                dm = await discord.message(discord.dm_channel(OWNER), "clankie, a word in private", author_id=OWNER)

                assert (await a.reply_to(to_a["id"])).content == "Shard zero here."
                assert (await b.reply_to(to_b["id"])).content == "Shard one here."
                assert (await a.reply_to(dm["id"])).content == "Shard zero, privately."

                # the gateway carried each message to its own shard's session only
                assert discord.delivered_to(to_a["id"]) == [(0, 2)]
                assert discord.delivered_to(to_b["id"]) == [(1, 2)]
                assert discord.delivered_to(dm["id"]) == [(0, 2)]
                # and each tree's model, receipts and lanes know only their own rooms
                assert "guild zero" in seen_by_model(a) and "guild one" not in seen_by_model(a)
                assert "guild one" in seen_by_model(b) and "guild zero" not in seen_by_model(b)
                assert "private" not in seen_by_model(b)
                people = {to_a["id"], to_b["id"], dm["id"]}  # (the bot's own echoed posts have receipts too)
                assert {r["delivery_id"] for r in a.receipts()} & people == {to_a["id"], dm["id"]}
                assert {r["delivery_id"] for r in b.receipts()} & people == {to_b["id"]}
                assert {lane.key.split(":")[-1] for lane in await b.lanes()} == {C1}
                assert len(b.anthropic.requests) == 1
        finally:
            await discord.close()

    asyncio.run(main())
