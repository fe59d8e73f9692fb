"""The Discord port answers only once login has said who the bot is (bridge/discord_client.py)."""

from __future__ import annotations

import asyncio

import pytest

from bridge.discord_client import DiscordPort
from bridge.discord_gateway import BridgeClient
from bridge.port import PostError


def test_a_history_read_before_login_is_transient_not_a_read_that_cannot_see_our_own_replies() -> None:
    """Before login the client has no user: a read-back then could not tell its own earlier reply (is_self)
    and a resumed delivery would post it again, so the port refuses, transiently, and the caller retries."""

    async def main() -> None:
        client = BridgeClient(on_message_cb=lambda _m: None, on_status=lambda _s: None, on_owner=lambda _o: None,
                              discover_gateway=False)
        port = DiscordPort(10 * 1024 * 1024)
        port.client = client
        try:
            assert client.user is None
            with pytest.raises(PostError) as info:
                await port.history_after("101", "1", 100)
            assert info.value.transient and info.value.code == "discord_not_connected"
        finally:
            await client.close()

    asyncio.run(main())
