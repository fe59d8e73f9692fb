"""A waiting message held packed reads back as the same message (bridge/packing.py), and is small."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.inbound import Inbound
from bridge.packing import Payload, pack, unpack
from clankie.protocol import Author, Room, Trigger

ids = st.text(alphabet="0123456789", min_size=1, max_size=20)
texts = st.text(max_size=300)


@st.composite
def messages(draw: st.DrawFn) -> tuple[str, Room, Inbound, Trigger]:
    """A message as the bridge journals it: mostly consistent (ids, room, author, text repeat), sometimes not."""
    mid = draw(ids)
    guild = draw(st.one_of(st.none(), ids))
    room = Room(guild_id=guild, channel_id=draw(ids))
    author = Author(id=draw(ids), name=draw(st.text(max_size=40)), is_bot=draw(st.booleans()),
                    is_system_actor=draw(st.booleans()))
    text = draw(texts)
    drift = draw(st.booleans())  # the inbound says something its entry or trigger does not
    inbound = Inbound(
        message_id=draw(ids) if drift and draw(st.booleans()) else mid,
        channel_id=draw(ids) if drift and draw(st.booleans()) else room.channel_id,
        guild_id=draw(st.one_of(st.none(), ids)) if drift and draw(st.booleans()) else guild,
        author_id=draw(ids) if drift and draw(st.booleans()) else author.id,
        text=draw(texts) if drift and draw(st.booleans()) else text,
        author_is_bot=draw(st.booleans()), from_self=draw(st.booleans()), mentions_bot=draw(st.booleans()),
        replies_to_bot=draw(st.booleans()), attachment_ids=tuple(draw(st.lists(ids, max_size=3))),
        readable_attachments=draw(st.integers(0, 10)), refers_to=draw(st.one_of(st.none(), ids)),
    )
    trigger = Trigger(message_id=mid, author=author, text=text, unprompted=draw(st.booleans()),
                      at=draw(st.floats(0, 2e9, allow_nan=False)))
    return mid, room, inbound, trigger


@settings(max_examples=300, deadline=None)
@given(messages(), st.booleans())
def test_a_packed_message_reads_back_as_the_same_inbound_and_trigger(
    message: tuple[str, Room, Inbound, Trigger], from_disk: bool
) -> None:
    """Whether the line came from this process (tuples) or was read back from the journal file (JSON lists)."""
    mid, room, inbound, trigger = message
    payload: Payload = {"inbound": inbound.to_wire(), "trigger": trigger.to_wire()}
    if from_disk:
        payload = json.loads(json.dumps(payload))
    back = unpack(mid, room, pack(mid, room, payload))
    assert Inbound.from_wire(back["inbound"]) == inbound
    assert Trigger.model_validate(back["trigger"]) == trigger


def test_an_ordinary_waiting_message_is_held_in_under_a_third_of_its_journal_line() -> None:
    mid, room = "1310000000000000001", Room(guild_id="1300000000000000001", channel_id="1300000000000001234")
    text = "a question about the match in 1234"
    author = Author(id="500000000000000001", name="someone")
    inbound = Inbound(message_id=mid, channel_id=room.channel_id, guild_id=room.guild_id, author_id=author.id,
                      text=text, mentions_bot=True)
    trigger = Trigger(message_id=mid, author=author, text=text, at=1_800_000_000.123)
    payload: Payload = {"inbound": inbound.to_wire(), "trigger": trigger.to_wire()}
    whole = len(json.dumps(payload, separators=(",", ":")))
    assert len(pack(mid, room, payload)) * 3 < whole
