"""The fake Discord itself: a held route is recorded at once and answered only when released."""

from __future__ import annotations

import asyncio

import aiohttp

from clankie.testing.fake_discord import FakeDiscord
from tests.polling import until

HISTORY = "GET /channels/{id}/messages"


def test_a_held_route_is_recorded_at_once_and_answered_when_released() -> None:
    """hold() keeps calls to one route waiting (other routes answer), until its event is set."""

    async def body() -> None:
        fake = FakeDiscord(guilds={"100": ["101"]})
        await fake.start()
        try:
            gate = fake.hold(HISTORY)
            async with aiohttp.ClientSession(headers={"Authorization": f"Bot {fake.token}"}) as http:
                held = asyncio.create_task(http.get(f"{fake.api_base}/channels/101/messages?limit=5"))
                await until(lambda: any(c.route == HISTORY for c in fake.calls), what="the history call being recorded")
                async with http.get(f"{fake.api_base}/users/@me") as me:
                    assert me.status == 200  # another route is not held
                assert not held.done()
                gate.set()
                async with await held as response:
                    assert response.status == 200 and await response.json() == []
        finally:
            await fake.close()

    asyncio.run(asyncio.wait_for(body(), 20))
