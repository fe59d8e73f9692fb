"""Lane keys, file names and operator room specs."""

from __future__ import annotations

from pathlib import Path

import pytest

from clankie.protocol import Room
from service.captain.lanes import keys


def test_room_keys_follow_the_contract() -> None:
    """Guild rooms and DMs get ``discord:<character>:discord:<guild|dm>:<channel>``."""
    assert keys.room_lane_key("clankie", Room(guild_id="g1", channel_id="c1")) == "discord:clankie:discord:g1:c1"
    assert keys.room_lane_key("clankie", Room(channel_id="d9")) == "discord:clankie:discord:dm:d9"


def test_lane_file_key_quotes_the_target() -> None:
    """The lane log and one-shot dirs use ``discord_presence~<quoted target>``."""
    room = Room(guild_id="866430493889134672", channel_id="900")
    assert keys.lane_file_key(room) == "discord_presence~866430493889134672%3A900"


def test_paths_live_under_captain(tmp_path: Path) -> None:
    """Rooms, system lanes, one-shot turns and lane logs live where ARCHITECTURE §5 says."""
    p = keys.CaptainPaths.under(tmp_path)
    room = Room(guild_id="g1", channel_id="c1")
    assert p.room("discord:clankie:discord:g1:c1") == tmp_path / "captain/rooms/discord%3Aclankie%3Adiscord%3Ag1%3Ac1"
    assert p.turns(room) == tmp_path / "captain/turns/discord_presence~g1%3Ac1"
    assert p.lane_log(room) == tmp_path / "captain/lanes/discord_presence~g1%3Ac1.jsonl"
    assert p.system("x").parent == tmp_path / "captain/system"


@pytest.mark.parametrize(
    ("spec", "room"),
    [
        ("discord:clankie:discord:g1:c1", Room(guild_id="g1", channel_id="c1")),
        ("g1/c1", Room(guild_id="g1", channel_id="c1")),
        ("dm/d9", Room(channel_id="d9")),
        ("local:lab", Room(guild_id="local", channel_id="lab")),
        ("lobby", Room(guild_id="local", channel_id="lobby")),
        (" my-room_2 ", Room(guild_id="local", channel_id="my-room_2")),
    ],
)
def test_operator_room_specs(spec: str, room: Room) -> None:
    """``say`` accepts a lane key, guild/channel, dm/channel, local:name or a bare name meaning local:name."""
    assert keys.parse_room(spec, "clankie") == room


@pytest.mark.parametrize("spec", ["", "no pe", "g1/", "a/b/c", "discord:other:discord:g1:c1", "x:y", "lobby!"])
def test_bad_room_specs_are_refused_clearly(spec: str) -> None:
    """Anything else is a clear error."""
    with pytest.raises(ValueError, match="not a lane key"):
        keys.parse_room(spec, "clankie")


def test_trusted_rooms_match_explicit_entries_only() -> None:
    """A room is trusted only when it is on the operator's list; the wire's ``trusted`` flag is not authority."""
    room = Room(guild_id="1", channel_id="2")
    assert keys.is_trusted(room, ("1/2",))
    assert keys.is_trusted(room, ("1:2",)) and keys.is_trusted(room, ("2",))
    assert keys.is_trusted(Room(channel_id="5"), ("dm/5",))
    assert not keys.is_trusted(room, ("1/3", "dm/2"))
    assert not keys.is_trusted(Room(guild_id="1", channel_id="9", trusted=True), ())
