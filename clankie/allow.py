"""The guild-room allow-rule: which rooms of which guilds the presence may act in, written once.

The bridge reads it to admit a message and to decide which rooms it catches
up on and may be asked to post in; the service reads it before a tool
writes into a room. Both take the lists from ``CLANKIE_DISCORD_GUILD_IDS``
and ``CLANKIE_DISCORD_CHANNEL_IDS``:

=================================  ==================================  =========================
guild listed?                      channel ids                         verdict
=================================  ==================================  =========================
no (or the list is empty)          any                                 ``guild_not_allowlisted``
yes                                empty: every channel of the guild   allowed
yes                                listed, and this one among them     allowed
yes                                listed, and this one not            ``channel_not_allowlisted``
no guild at all (a DM)             any                                 ``guild_not_allowlisted``
=================================  ==================================  =========================

A DM is in no guild, so this rule never allows one: whether a DM is heard is
the bridge's DM policy (``CLANKIE_DISCORD_DM_POLICY``), asked before this rule
and apart from it. The refusals are the stable codes the bridge's receipts
carry. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Collection, Container

GUILD_NOT_ALLOWLISTED = "guild_not_allowlisted"
CHANNEL_NOT_ALLOWLISTED = "channel_not_allowlisted"


def refusal(guild_ids: Container[str], channel_ids: Collection[str], guild_id: str | None, channel_id: str) -> str | None:
    """Why the room ``channel_id`` of ``guild_id`` is not allowed by the two lists, or None if it is."""
    if guild_id is None or guild_id not in guild_ids:
        return GUILD_NOT_ALLOWLISTED
    if channel_ids and channel_id not in channel_ids:
        return CHANNEL_NOT_ALLOWLISTED
    return None


def admits(guild_ids: Container[str], channel_ids: Collection[str], guild_id: str | None, channel_id: str) -> bool:
    """Whether the two lists allow the room ``channel_id`` of ``guild_id`` (see :func:`refusal`)."""
    return refusal(guild_ids, channel_ids, guild_id, channel_id) is None
