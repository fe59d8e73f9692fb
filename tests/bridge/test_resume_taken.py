"""A shard taken from another tree (the postgres profile's drain, bridge/recovery.py ``resume_taken``): an admitted
delivery the other tree left open is answered again unless the room's history shows the bot's reply to it (the
other tree posted, then died before its close line): that one is closed ``settled`` with the reply, never run twice.
And the other side: a tree whose admission is refused because the lease is gone leaves no sign in the room."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from bridge import recovery
from clankie.protocol import Author, Room, Trigger, TurnSubmit
from clankie.store.journal_ports import JournalRefused, JournalStore, Line, StoredLines
from clankie.store.ports import Shard
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


class Refusing:
    """The journal's store, as the PostgreSQL adapter answers once the shard's lease is gone (or the database is)."""

    def __init__(self, inner: JournalStore, code: str) -> None:
        self.inner, self.code = inner, code
        self.size, self.last_error = 0, None

    def read(self) -> StoredLines:
        return StoredLines()

    def read_shard(self, shard: Shard) -> StoredLines:
        return StoredLines()

    def append(self, shard: Shard | None, lines: Sequence[Line]) -> None:
        raise JournalRefused(self.code)

    def sync_soon(self) -> None:
        pass

    async def rewrite(self, lines: Sequence[tuple[Shard | None, Line]]) -> None:
        pass

    def close(self) -> None:
        self.inner.close()


@pytest.mark.parametrize(("code", "reacted"), [("stale_epoch", False), ("not_held", False),
                                               ("database_unavailable", True)])
def test_an_admission_refused_because_the_lease_is_gone_fails_here_without_a_sign_in_the_room(
        env: dict[str, str], code: str, reacted: bool) -> None:
    """The delivery is the shard's taker's to drain and answer: this tree records it failed with the refusal's code
    and shows nothing in the room; a database that did not answer fails it visibly, as a refusing disk does."""
    async def main() -> None:
        async with running(env) as h:
            h.app.journal.store = Refusing(h.app.journal.store, code)
            sent = await h.fake.message(CHAN, "clankie, hello?", author_id=PERSON)
            await h.until(lambda: "failed" in h.outcomes(sent["id"]))
            assert h.service.submits == [] and h.fake.posts_in(CHAN) == []
            failed = [r.get("reason") for r in h.receipts() if r["delivery_id"] == sent["id"] and r["outcome"] == "failed"]
            assert failed == [code]
            if reacted:
                await h.until(lambda: bool(h.fake.reactions.get(sent["id"])))
            else:
                assert h.fake.reactions.get(sent["id"]) is None and h.app.bridge.disk.reason is None

    asyncio.run(main())
