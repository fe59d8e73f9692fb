"""A sharded bridge, end to end: real discord.py ``AutoShardedClient`` against the fake Discord's sharded gateway."""

from __future__ import annotations

import asyncio

import aiohttp

from bridge.app import BridgeApp
from clankie.metrics import METER
from clankie.shards import shard_of
from clankie.testing.fake_discord import FakeDiscord
from tests.bridge.harness import OWNER, PERSON, running

G0, G1 = str(1000 << 22), str(1001 << 22)  # guilds on shard 0 and shard 1 of 2
C0, C1 = "4194304101", "4194304201"
BOTH = {"CLANKIE_DISCORD_GUILD_IDS": f"{G0},{G1}", "CLANKIE_DISCORD_SHARD_COUNT": "2"}


def shard_gauges(app: BridgeApp) -> tuple[dict[tuple[str, ...], float], float]:
    """The shard gauges one heartbeat sets, as the supervisor's endpoint would serve them (metrics on for the look)."""
    METER.enabled = True
    try:
        app.heartbeat()
        report = METER.report()
    finally:
        METER.enabled = False
    assert report is not None
    up = {row.labels: row.value for row in report.gauges["clankie_discord_shard_up"]}
    (count,) = report.gauges["clankie_discord_shard_count"]
    return up, count.value


def fake() -> FakeDiscord:
    assert (shard_of(G0, 2), shard_of(G1, 2)) == (0, 1)
    return FakeDiscord(guilds={G0: [C0], G1: [C1]}, shards=2)


def test_a_tree_on_shard_1_hears_its_guilds_only_and_no_direct_messages(env: dict[str, str]) -> None:
    """Shard 1 of 2: the other shard's guild and the owner's DM never reach it; status names the shard."""

    async def main() -> None:
        discord = fake()
        async with running(env, fake=discord, overrides={**BOTH, "CLANKIE_DISCORD_SHARD_IDS": "1"}) as h:
            assert discord.shards_connected() == [(1, 2)]
            beat = h.app.heartbeat()
            assert beat.detail.endswith("; shards: 1/2") and beat.report["shards"] == "1/2"
            assert shard_gauges(h.app) == ({("1",): 1.0}, 2.0)  # what ClankieShardDown and ClankieShardsUnserved read
            watch = h.app.port.client.watch  # type: ignore[union-attr]  # the sharded client's
            watch.dropped(1)
            assert shard_gauges(h.app) == ({("1",): 0.0}, 2.0)
            watch.resumed(1)
            assert [g.id for g in h.app.port.client.guilds] == [int(G1)]  # type: ignore[union-attr]  # connected
            other = await discord.message(C0, "clankie, over there", author_id=PERSON)
            dm = await discord.message(discord.dm_channel(OWNER), "clankie, privately", author_id=OWNER)
            mine = await discord.message(C1, "clankie, over here", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(mine["id"]))
            assert discord.delivered_to(other["id"]) == [] and discord.delivered_to(dm["id"]) == []
            assert discord.delivered_to(mine["id"]) == [(1, 2)]
            assert [s.trigger.message_id for s in h.service.submits] == [mine["id"]]

    asyncio.run(main())


def test_one_bridge_on_both_shards_resumes_both_and_recovers_once_after_new_sessions(env: dict[str, str]) -> None:
    """Shards 0-1 of 2 in one client: every guild and the DMs arrive; a resume of both fetches nothing; new sessions
    on both read the gap back once, after both are up again."""

    async def main() -> None:
        discord = fake()
        async with running(env, fake=discord, overrides={**BOTH, "CLANKIE_DISCORD_SHARD_IDS": "0-1"}) as h:
            assert sorted(discord.shards_connected(), key=str) == [(0, 2), (1, 2)]
            assert h.app.heartbeat().report["shards"] == "0,1/2"
            first = [await discord.message(c, f"clankie, hello {c}", author_id=PERSON) for c in (C0, C1)]
            dm = await discord.message(discord.dm_channel(OWNER), "clankie, privately", author_id=OWNER)
            await h.until(lambda: all("settled" in h.outcomes(m["id"]) for m in [*first, dm]))
            assert discord.delivered_to(dm["id"]) == [(0, 2)]

            history_reads = sum(1 for c in discord.calls if c.route == "GET /channels/{id}/messages")
            await discord.close_gateway(4000)  # both shards drop and RESUME
            await h.until(lambda: discord.resumes >= 2 and h.app.discord_status == "connected")
            await h.until(lambda: h.app.journal.state.quiet_since() is None)
            assert sum(1 for c in discord.calls if c.route == "GET /channels/{id}/messages") == history_reads

            readies = discord.readies
            await discord.invalidate_sessions()  # both shards must IDENTIFY anew: what they missed is read back
            await h.until(lambda: discord.readies >= readies + 2, timeout=30)  # discord.py spaces IDENTIFYs 5 s apart
            await h.until(lambda: h.app._recovering is not None and h.app._recovering.done()
                          and h.app.journal.state.quiet_since() is None)
            assert h.app.discord_status == "connected"
            assert len(h.service.submits) == 3  # read back, nothing answered twice

    asyncio.run(main())


def test_the_fake_refuses_a_shard_outside_its_count() -> None:
    """Discord closes an IDENTIFY with an impossible ``shard`` with 4010; the fake says what it recommends."""

    async def main() -> None:
        discord = fake()
        await discord.start()
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(f"{discord.api_base}/gateway/bot",
                                       headers={"Authorization": f"Bot {discord.token}"}) as resp:
                    assert (await resp.json())["shards"] == 2
                async with session.ws_connect(discord.gateway_url) as ws:
                    hello = await ws.receive_json()
                    assert hello["op"] == 10
                    await ws.send_json({"op": 2, "d": {"token": discord.token, "intents": 0, "shard": [2, 2]}})
                    closed = await ws.receive()
                    assert closed.type == aiohttp.WSMsgType.CLOSE and closed.data == 4010
        finally:
            await discord.close()

    asyncio.run(main())
