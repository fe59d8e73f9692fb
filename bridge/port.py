"""What the bridge needs from Discord, as a small interface (no discord imports).

The Discord implementation is :class:`bridge.discord_client.DiscordPort`;
delivery, typing and the service handlers are written against this, so the
retry and degrade rules read without discord.py in the way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bridge.inbound import Inbound
from clankie.protocol import HistoryMessage, Room, Trigger


@dataclass(frozen=True, slots=True)
class File:
    filename: str
    data: bytes


class PostError(Exception):
    """Raised when Discord did not take a post; ``transient`` says whether trying again can help."""

    transient = False

    def __init__(self, status: int, code: str, retry_after: float = 0.0) -> None:
        super().__init__(f"discord answered {status} ({code})")
        self.status = status
        self.code = code
        self.retry_after = retry_after


class Transient(PostError):
    """Raised for 429, 5xx and connection failures: the same post may succeed later."""

    transient = True


class Rejected(PostError):
    """Raised for a 4xx other than 429: this exact post will never be accepted."""


class DiscordPort(Protocol):
    async def post(
        self,
        channel_id: str,
        content: str,
        *,
        guild_id: str | None,
        reply_to: str | None,
        files: tuple[File, ...],
        nonce: str | None,
    ) -> str:
        """Create a message (no mentions ping anyone); returns its id or raises :class:`PostError`."""

    async def react(self, channel_id: str, message_id: str, emoji: str) -> None:
        """Add the bot's reaction ``emoji`` to a message (Discord's PUT: adding it twice is one reaction)."""

    async def unreact(self, channel_id: str, message_id: str, emoji: str) -> None:
        """Take the bot's reaction ``emoji`` off a message (Discord's DELETE: none there is no error)."""

    async def edit(self, channel_id: str, message_id: str, content: str) -> None:
        """Replace the content of a message the bot posted (no mentions ping anyone); raises :class:`PostError`."""

    async def delete(self, channel_id: str, message_id: str) -> None:
        """Delete a message the bot posted; raises :class:`PostError`."""

    async def typing(self, channel_id: str) -> None:
        """Show the typing indicator once (it lasts about 10 s); raises on failure."""

    async def history(self, channel_id: str, before: str | None, limit: int) -> list[HistoryMessage]:
        """Up to ``limit`` messages before ``before``, oldest first."""

    async def history_after(self, channel_id: str, after: str, limit: int) -> list[HistoryMessage]:
        """Up to ``limit`` messages right after ``after``, oldest first (one request)."""

    async def missed(self, room: Room, after: str, limit: int) -> list[tuple[Inbound, Room, Trigger]]:
        """Up to ``limit`` messages after ``after`` in ``room``, oldest first, as admission sees them."""

    def active_rooms(self) -> list[tuple[Room, int]]:
        """Every guild text room the gateway told us of, with the id of its newest message."""

    def upload_limit(self, guild_id: str | None) -> int:
        """The most bytes of files one message may carry in this room."""
