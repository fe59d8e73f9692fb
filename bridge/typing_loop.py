"""The typing indicator of one held delivery: refreshed until it settles, quiet on failure, bounded."""

from __future__ import annotations

import logging

from bridge.port import DiscordPort
from clankie.clock import Clock

log = logging.getLogger(__name__)

TYPING_REFRESH_S = 8.0
TYPING_BACKSTOP_S = 30 * 60.0


async def typing_loop(port: DiscordPort, clock: Clock, channel_id: str) -> None:
    """Show typing every :data:`TYPING_REFRESH_S` for at most :data:`TYPING_BACKSTOP_S`; the first failure ends it."""
    started = clock.monotonic()
    while clock.monotonic() - started < TYPING_BACKSTOP_S:
        try:
            await port.typing(channel_id)
        except Exception as exc:  # cosmetic: the first failure ends the indicator, never the turn
            log.info("typing in channel %s failed (%s); not refreshing", channel_id, type(exc).__name__)
            return
        await clock.sleep(TYPING_REFRESH_S)
