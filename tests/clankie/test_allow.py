"""The guild-room allow-rule, as one table: the bridge's admission and the service's tool writes both obey it."""

from __future__ import annotations

import pytest

from bridge.admission import Ingress, Policy
from clankie import allow
from clankie.protocol import Room
from service.captain.tools.model_tools import Admission

GUILD, OTHER_GUILD = "100", "200"
CHANNEL, OTHER_CHANNEL = "10", "20"

CASES = [
    # (guild ids, channel ids, the room's guild, the room's channel, verdict)
    ((GUILD,), (), GUILD, CHANNEL, None),  # no channel list: every channel of a listed guild
    ((GUILD,), (), OTHER_GUILD, CHANNEL, allow.GUILD_NOT_ALLOWLISTED),
    ((GUILD,), (CHANNEL,), GUILD, CHANNEL, None),
    ((GUILD,), (CHANNEL,), GUILD, OTHER_CHANNEL, allow.CHANNEL_NOT_ALLOWLISTED),
    ((GUILD,), (CHANNEL,), OTHER_GUILD, CHANNEL, allow.GUILD_NOT_ALLOWLISTED),  # the guild is asked first
    ((GUILD, OTHER_GUILD), (CHANNEL,), OTHER_GUILD, CHANNEL, None),  # channel ids are room ids, in any listed guild
    ((), (), GUILD, CHANNEL, allow.GUILD_NOT_ALLOWLISTED),  # no guild list: no guild room at all
    ((), (CHANNEL,), GUILD, CHANNEL, allow.GUILD_NOT_ALLOWLISTED),  # a channel list alone allows nothing
    ((GUILD,), (), None, CHANNEL, allow.GUILD_NOT_ALLOWLISTED),  # a DM is no guild room (the DM policy decides it)
    ((GUILD,), (CHANNEL,), None, CHANNEL, allow.GUILD_NOT_ALLOWLISTED),
]


@pytest.mark.parametrize(("guilds", "channels", "guild_id", "channel_id", "verdict"), CASES)
def test_the_rule(
    guilds: tuple[str, ...], channels: tuple[str, ...], guild_id: str | None, channel_id: str, verdict: str | None
) -> None:
    assert allow.refusal(frozenset(guilds), frozenset(channels), guild_id, channel_id) == verdict
    assert allow.admits(guilds, channels, guild_id, channel_id) is (verdict is None)


@pytest.mark.parametrize(("guilds", "channels", "guild_id", "channel_id", "verdict"), CASES)
def test_the_service_and_the_bridge_read_the_same_rule(
    guilds: tuple[str, ...], channels: tuple[str, ...], guild_id: str | None, channel_id: str, verdict: str | None
) -> None:
    """A tool may write into exactly the guild rooms the bridge would admit a message from."""
    ingress = Ingress(Policy(guild_ids=frozenset(guilds), channel_ids=frozenset(channels)))
    service = Admission(guild_ids=guilds, channel_ids=channels)
    room = Room(guild_id=guild_id, channel_id=channel_id)
    assert ingress.room_admitted(guild_id, channel_id) is (verdict is None)
    assert service.admits(room) is (verdict is None)
