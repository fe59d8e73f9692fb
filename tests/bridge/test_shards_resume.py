"""A sharded bridge keeps each shard's gateway session across processes: the next one RESUMEs every shard (issue 35).

Real discord.py ``AutoShardedClient`` (bridge/sharded_gateway.py) on shards 0-1 of 2 against the loopback fake,
whose sessions outlive their sockets. As in tests/bridge/test_gateway_resume.py, one fake Discord and one service
double live through several bridge "processes" on one state directory; a kill aborts every shard's TCP connection
with no close frame, as the kernel does for a SIGKILLed process, before the app is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from bridge.app import BridgeApp
from bridge.delivery import RetryPolicy
from bridge.parked import log_in_parked
from bridge.sharded_gateway import ShardedBridgeClient
from clankie import paths
from clankie.settings import load
from clankie.shards import shard_of
from clankie.testing.fake_discord import FakeDiscord
from tests.bridge.harness import PERSON, FakeService
from tests.bridge.test_gateway_resume import Life, World, life

pytestmark = pytest.mark.timeout(90)

G0, G1 = str(1000 << 22), str(1001 << 22)  # guilds on shard 0 and shard 1 of 2
C0, C1 = "4194304101", "4194304201"
SHARDED = {"CLANKIE_DISCORD_GUILD_IDS": f"{G0},{G1}", "CLANKIE_DISCORD_SHARD_COUNT": "2",
           "CLANKIE_DISCORD_SHARD_IDS": "0-1"}


@contextlib.asynccontextmanager
async def world(env: dict[str, str]) -> AsyncIterator[World]:
    assert (shard_of(G0, 2), shard_of(G1, 2)) == (0, 1)
    fake = FakeDiscord(guilds={G0: [C0], G1: [C1]}, shards=2)
    fake.max_concurrency = 2
    await fake.start()
    settings = load(env)
    paths.ensure_private_dir(settings.runtime_dir)
    service = FakeService(paths.socket_path(settings.runtime_dir, "service"))
    await service.start()
    try:
        yield World(env, fake, service, SHARDED)
    finally:
        await service.close()
        await fake.close()


def sharded(one: Life) -> ShardedBridgeClient:
    client = one.app.port.client
    assert isinstance(client, ShardedBridgeClient)
    return client


async def kill(one: Life) -> None:
    """SIGKILL, in process: every shard's TCP connection aborted (no close frame), then the app stops."""
    client = sharded(one)
    for shard_id in (0, 1):
        client._get_websocket(shard_id=shard_id).socket._writer.transport.abort()  # the kernel's part in a SIGKILL
    await one.stop()


async def traffic(w: World, text: str, n: int) -> list[str]:
    return [str((await w.fake.message(C0 if i % 2 else C1, f"{text} {i}", author_id=PERSON))["id"]) for i in range(n)]


def history_reads(w: World, channel: str = "") -> int:
    return sum(1 for c in w.fake.calls if c.method == "GET" and "after=" in c.query and channel in c.path)


def test_a_killed_sharded_bridge_resumes_every_shard_and_answers_the_gap_once(env: dict[str, str]) -> None:
    """kill -9 under traffic → the next process RESUMEs both shards (no IDENTIFY, no history read), what was said on
    either shard meanwhile is replayed and answered once; a planned stop closes with 4000 and resumes as well."""

    async def main() -> None:
        async with world(env) as w:
            async with life(w) as first:
                assert sharded(first).gate.max_concurrency == 2  # GET /gateway/bot's, for the IDENTIFYs
                before = await traffic(w, "before", 4)
                await w.until(lambda: all(w.replies_to(m) for m in before), "the first answers")
                in_flight = await traffic(w, "in flight", 4)
                await kill(first)
            assert w.fake.identifies == 2
            stored = {tuple(s["shard"]) for s in w.session_file()["sessions"]}
            assert stored == {(0, 2), (1, 2)}
            gap = await traffic(w, "gap", 6)
            async with life(w) as second:
                await w.until(lambda: all(w.replies_to(m) for m in [*in_flight, *gap]), "the gap answered")
                assert second.app.keeper is not None
                report = second.app.heartbeat().report["gateway"]
                assert report["resumes_today"] == 2 and report["identifies_today"] == 2
                assert set(report["shards"]) == {"0/2", "1/2"}
            assert (w.fake.identifies, w.fake.resumes, w.fake.gateway.refused) == (2, 2, 0)
            assert history_reads(w) == 0  # the RESUMEs replayed the gap: no catch-up read
            async with life(w):  # the second stopped as on SIGTERM: 4000 on each shard, both resumable
                after = await traffic(w, "after", 2)
                await w.until(lambda: all(w.replies_to(m) for m in after), "live again")
            assert (w.fake.identifies, w.fake.resumes) == (2, 4)
            assert w.fake.gateway.shared == 0  # never two processes on one session
            assert 1000 not in w.fake.gateway.closed_codes and 4000 in w.fake.gateway.closed_codes
            for m in [*before, *in_flight, *gap, *after]:
                assert w.replies_to(m) == 1, m

    asyncio.run(main())


def test_one_shards_refused_resume_identifies_that_shard_alone_and_reads_the_gap_back(env: dict[str, str]) -> None:
    """Discord dropped shard 1's session: the next process RESUMEs shard 0 and IDENTIFYs shard 1 only, reads the gap
    back once both are up, and answers each message once (the replayed ones and the read-back ones de-duplicated)."""

    async def main() -> None:
        async with world(env) as w:
            async with life(w) as first:
                before = await traffic(w, "before", 2)
                await w.until(lambda: all(w.replies_to(m) for m in before), "the first answers")
                await kill(first)
            gap = await traffic(w, "gap", 6)
            w.fake.gateway.refuse_shards = {1}
            async with life(w) as second:
                await w.until(lambda: all(w.replies_to(m) for m in gap), "the gap answered")
                assert second.app.keeper is not None
                report = second.app.heartbeat().report["gateway"]
                assert (report["resumes_today"], report["identifies_today"], report["refused_today"]) == (1, 3, 1)
                assert {k: v["state"] for k, v in report["shards"].items()} == {"0/2": "live", "1/2": "live"}
            assert (w.fake.identifies, w.fake.resumes, w.fake.gateway.refused) == (3, 1, 1)
            assert history_reads(w) > 0  # shard 1's new session: the gap read back
            assert history_reads(w, C0) == 0  # shard 0 resumed (its gap replayed): its room is not read
            assert w.fake.gateway.shared == 0
            for m in [*before, *gap]:
                assert w.replies_to(m) == 1, m

    asyncio.run(main())


def test_a_parked_sharded_spare_resumes_every_shard_for_a_killed_bridge(env: dict[str, str]) -> None:
    """The spare logs in beside the live sharded bridge with no socket (no IDENTIFY); once the bridge is killed, its
    app RESUMEs both shards over the spare's client and answers the gap once; never two sockets on one session."""

    async def main() -> None:
        async with world(env) as w:
            settings = load(w.env)
            async with life(w) as first:
                warm = await log_in_parked(settings, guild_ready_timeout=0.05)
                assert isinstance(warm, ShardedBridgeClient) and warm.user is not None
                assert len(w.fake.gateway.sockets) == 2 and w.fake.identifies == 2  # the live bridge's shards alone
                before = await traffic(w, "before", 2)
                await w.until(lambda: all(w.replies_to(m) for m in before), "the live bridge answers")
                await kill(first)
            gap = await traffic(w, "gap", 6)
            app = BridgeApp(settings, retry=RetryPolicy(attempts=5, base=0.01, cap=0.05), guild_ready_timeout=0.05,
                            warm=warm)
            second = Life(app, asyncio.create_task(app.run()))
            try:
                await w.until(lambda: all(w.replies_to(m) for m in gap), "the gap answered")
                assert app.port.client is warm and app.discord_status == "connected"
                assert app.ingress.policy.owner_id is not None  # login's owner, told to this life's admission
            finally:
                await second.stop()
            assert (w.fake.identifies, w.fake.resumes, w.fake.gateway.shared) == (2, 2, 0)
            assert history_reads(w) == 0
            for m in [*before, *gap]:
                assert w.replies_to(m) == 1, m

    asyncio.run(main())
