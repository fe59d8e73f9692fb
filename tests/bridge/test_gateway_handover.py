"""A new message reaches the bridge while discord.py parses its event, with no task of its own (bridge/discord_gateway.py).

A burst read off the gateway in one go is parsed without a pause; one task per
message would keep every ``Message`` of the burst alive at once (issue 25: the
bridge's memory per waiting message). Both gateway clients hand it over in place.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from bridge.discord_gateway import BridgeClient, Hooks
from bridge.sharded_gateway import ShardedBridgeClient


def _plain(cb: Any) -> BridgeClient:
    return BridgeClient(on_message_cb=cb, on_status=lambda _s: None, on_owner=lambda _o: None, discover_gateway=False)


def _sharded(cb: Any) -> ShardedBridgeClient:
    hooks = Hooks(on_message=cb, on_status=lambda _s: None, on_owner=lambda _o: None)
    return ShardedBridgeClient(hooks, shard_count=2, shard_ids=(0, 1), discover_gateway=False)


@pytest.mark.parametrize("make", [_plain, _sharded], ids=["one session", "shards"])
def test_a_message_is_handed_over_during_its_dispatch_and_leaves_no_task_behind(make: Any) -> None:
    async def main() -> None:
        got: list[object] = []
        client = make(got.append)
        try:
            before = asyncio.all_tasks()
            for n in range(1000):
                client.dispatch("message", n)
                assert got[-1] == n  # delivered before dispatch returned, in order
            assert asyncio.all_tasks() == before
        finally:
            await client.http.close()  # never logged in: only its HTTP session to close

    asyncio.run(main())


def test_a_handler_that_fails_is_logged_and_the_next_message_still_arrives(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        got: list[object] = []

        def deliver(message: object) -> None:
            if message == "bad":
                raise RuntimeError("a bug in the bridge")
            got.append(message)

        client = _plain(deliver)
        try:
            with caplog.at_level(logging.ERROR, logger="bridge.discord_gateway"):
                client.dispatch("message", "bad")
            client.dispatch("message", "good")
            assert got == ["good"]
            assert "the bridge failed on an incoming message" in caplog.text
        finally:
            await client.close()

    asyncio.run(main())


def test_a_wait_for_on_messages_still_resolves() -> None:
    """discord.py's own listeners (``wait_for``) see the event as before."""

    async def main() -> None:
        async with _plain(lambda _m: None) as client:
            waiter = asyncio.ensure_future(client.wait_for("message", check=lambda m: m == "yes"))
            await asyncio.sleep(0)
            client.dispatch("message", "no")
            client.dispatch("message", "yes")
            assert await asyncio.wait_for(waiter, 5) == "yes"

    asyncio.run(main())
