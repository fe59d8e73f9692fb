"""A gateway client's close ends its HTTP session, whatever happens to whoever waits for it.

discord.py opens the HTTP session (and its connector) at login and ends it
only at the end of ``Client.close``. Before that, the bridge's close says
goodbye on the gateway socket (4000, so the next process can RESUME). A close
abandoned in between leaves the session to the garbage collector, which then
warns ``Unclosed client session`` into whatever runs next; a CI run failed on
one. Real discord.py against the loopback fake, plain and sharded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

import pytest

from bridge.app import BridgeApp
from bridge.delivery import RetryPolicy
from bridge.discord_gateway import BridgeClient
from bridge.parked import log_in_parked
from bridge.sharded_gateway import ShardedBridgeClient
from clankie.settings import load
from tests.bridge import test_gateway_resume as plain
from tests.bridge import test_shards_resume as sharded

pytestmark = pytest.mark.timeout(60)

World = Callable[[dict[str, str]], AbstractAsyncContextManager[plain.World]]
WORLDS = pytest.mark.parametrize("world", [plain.world, sharded.world], ids=["plain", "sharded"])


def session_open(client: BridgeClient | ShardedBridgeClient) -> bool:
    """Whether the client's HTTP session (opened at login) is still open: its connector closes with it."""
    return not client.http.connector.closed


@contextlib.asynccontextmanager
async def connected(env: dict[str, str], world: World) -> AsyncIterator[tuple[plain.World, plain.Life]]:
    async with world(env) as w, plain.life(w) as one:
        yield w, one


@WORLDS
def test_a_close_whose_waiter_is_cancelled_on_every_turn_still_says_goodbye_and_ends_the_http_session(
        env: dict[str, str], world: World) -> None:
    """The waiter gets its cancellation at once; the close goes on to its end: the sockets closed with 4000 (the
    session stays resumable) and the HTTP session's connector closed."""

    async def main() -> None:
        async with connected(env, world) as (w, one):
            client = one.app.port.client
            assert isinstance(client, BridgeClient | ShardedBridgeClient) and session_open(client)
            sockets = len(w.fake.gateway.sockets)
            waiter = asyncio.create_task(client.close())
            await asyncio.sleep(0)  # its first step: the close begun
            while not waiter.done():  # a waiter stopped again and again, as a stop during a lease change does
                waiter.cancel()
                await asyncio.sleep(0)
            assert waiter.cancelled()
            await w.until(lambda: not session_open(client), "the HTTP session's connector closed")
            assert w.fake.gateway.closed_codes == [4000] * sockets
            await client.close()  # a later caller waits for the same close, which has ended
            assert client.is_closed()

    asyncio.run(main())


@WORLDS
def test_a_parked_spares_client_is_closed_by_a_life_stopped_before_its_gateway_took_it(
        env: dict[str, str], world: World) -> None:
    """A spare logs in while the live bridge runs; the life it becomes is stopped in its first step (a SIGTERM as
    the spare takes over): the client it never used is closed with it, its HTTP session too."""

    async def main() -> None:
        async with world(env) as w:
            settings = load(w.env)
            warm = await log_in_parked(settings, guild_ready_timeout=0.05)
            assert warm is not None and session_open(warm)
            app = BridgeApp(settings, retry=RetryPolicy(attempts=5, base=0.01, cap=0.05), guild_ready_timeout=0.05,
                            warm=warm)
            task = asyncio.create_task(app.run())
            await asyncio.sleep(0)  # its first step: the journal read, its tasks created and not yet started
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 15)
            assert app.port.client is None  # the gateway never took it
            assert warm.is_closed() and not session_open(warm)
            assert (w.fake.identifies, w.fake.resumes) == (0, 0)

    asyncio.run(main())
