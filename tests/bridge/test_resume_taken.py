"""A shard taken from another tree (the postgres profile's drain, bridge/recovery.py ``resume_taken``): an admitted
delivery the other tree left open is answered again unless the room's history shows the bot's reply to it (the
other tree posted, then died before its close line): that one is closed ``settled`` with the reply, never run twice."""

from __future__ import annotations

import asyncio
from typing import Any

from bridge import recovery
from clankie.protocol import Author, Room, Trigger, TurnSubmit
from clankie.testing.fake_discord import FakeDiscord
from clankie.testing.fake_discord_records import message_payload, user
from tests.bridge.harness import CHAN, GUILD, PERSON, running


def stored(fake: FakeDiscord, payload: dict[str, Any]) -> dict[str, Any]:
    """A message in the room's history that this bridge's gateway never dispatched (the other tree's session did)."""
    fake.messages.setdefault(CHAN, []).append(payload)
    return payload


def test_a_taken_delivery_the_other_tree_answered_is_closed_with_its_reply_and_the_other_runs_again(
        env: dict[str, str]) -> None:
    async def main() -> None:
        async with running(env) as h:
            fake, journal, now = h.fake, h.app.journal, h.app.clock.wall()
            room = Room(guild_id=GUILD, channel_id=CHAN)
            asked = stored(fake, message_payload(fake.snowflake(), CHAN, GUILD, user(PERSON, "p"), "clankie, one?"))
            reply = message_payload(fake.snowflake(), CHAN, GUILD, fake.bot, "one!")
            reply["type"] = 19
            reply["message_reference"] = {"message_id": asked["id"], "channel_id": CHAN, "guild_id": GUILD}
            stored(fake, reply)
            unanswered = stored(fake, message_payload(fake.snowflake(), CHAN, GUILD, user(PERSON, "p"),
                                                      "clankie, two?"))
            for m in (asked, unanswered):  # what the other tree's journal held, as drain_shard reads it
                trigger = Trigger(message_id=m["id"], author=Author(id=PERSON, name="p"), text=m["content"], at=now)
                journal.admit(TurnSubmit(delivery_id=m["id"], room=room, trigger=trigger), f"fp{m['id']}", now,
                              catching_up=False)
            taken = [journal.state.entries[m["id"]] for m in (asked, unanswered)]

            report = await recovery.resume_taken(h.app.bridge, h.app.limits, now, taken)
            assert (report.answered_before, report.resumed) == (1, 1)
            await h.until(lambda: "settled" in h.outcomes(unanswered["id"]))
            assert [s.delivery_id for s in h.service.submits] == [unanswered["id"]]  # the answered one never ran
            assert h.outcomes(asked["id"]) == ["settled"]
            closed = journal.state.entries[asked["id"]]
            assert not closed.open and closed.replied == int(reply["id"])
            assert [p.content for p in fake.posts_in(CHAN)] == ["heard you (13)"]  # one post: the second's

    asyncio.run(main())
