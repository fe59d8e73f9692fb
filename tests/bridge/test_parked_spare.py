"""A parked spare bridge (bridge/parked.py): logged in beside the live bridge with no socket, then RESUMEs for it.

Real discord.py against the loopback fake, in one process, as in
tests/bridge/test_gateway_resume.py (whose world and lives this reuses); the
real tree's takeover by the supervisor is tests/integration/test_tree_resume.py.
"""

from __future__ import annotations

import asyncio

import pytest

from bridge.app import BridgeApp
from bridge.delivery import RetryPolicy
from bridge.parked import log_in_parked
from clankie.settings import load
from tests.bridge.harness import CHAN, CHAN2, PERSON
from tests.bridge.test_gateway_resume import Life, life, world

pytestmark = pytest.mark.timeout(60)


def test_a_spare_logs_in_beside_the_live_bridge_without_a_socket_and_resumes_its_session(env: dict[str, str]) -> None:
    """The spare knows /users/@me and holds no gateway socket while the bridge lives (no IDENTIFY, one socket);
    once the bridge is killed its app RESUMEs over the spare's client: the gap answered once, the owner and today's
    session starts learned at login reported, never two sockets on the session."""

    async def main() -> None:
        async with world(env) as w:
            settings = load(w.env)
            async with life(w) as first:
                warm = await log_in_parked(settings, guild_ready_timeout=0.05)
                assert warm is not None and warm.user is not None
                assert len(w.fake.gateway.sockets) == 1 and w.fake.identifies == 1  # the live bridge's alone
                before = await w.fake.message(CHAN, "before", author_id=PERSON)
                await w.until(lambda: w.replies_to(before["id"]) == 1, "the live bridge answers")
                await first.kill()
            gap = [await w.fake.message(CHAN if n % 2 else CHAN2, f"gap {n}", author_id=PERSON) for n in range(4)]
            app = BridgeApp(settings, retry=RetryPolicy(attempts=5, base=0.01, cap=0.05), guild_ready_timeout=0.05,
                            warm=warm)
            second = Life(app, asyncio.create_task(app.run()))
            try:
                await w.until(lambda: app.discord_status == "connected" or second.task.done(), "the spare connected")
                await w.until(lambda: all(w.replies_to(m["id"]) == 1 for m in gap), "the gap answered")
                assert app.port.client is warm
                assert app.ingress.policy.owner_id is not None  # login's owner, told to this life's admission
                assert app.keeper is not None and app.keeper.book.starts_remaining is not None
            finally:
                await second.stop()
            assert (w.fake.identifies, w.fake.resumes, w.fake.gateway.shared) == (1, 1, 0)
            assert all(w.replies_to(m["id"]) == 1 for m in [before, *gap])

    asyncio.run(main())


def test_a_spare_that_cannot_log_in_parks_cold(env: dict[str, str]) -> None:
    """A rejected token or no token at all: no client (the life it becomes logs in cold and reports it), no raise."""

    async def main() -> None:
        async with world(env, {"DISCORD_TOKEN": "not-the-token"}) as w:
            assert await log_in_parked(load(w.env)) is None
            assert await log_in_parked(load({k: v for k, v in w.env.items() if k != "DISCORD_TOKEN"})) is None
            assert w.fake.identifies == 0 and not w.fake.gateway.sockets

    asyncio.run(main())
