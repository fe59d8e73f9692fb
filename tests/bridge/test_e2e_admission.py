"""Who gets an answer (scenario 38): DM policies and the guild/channel allowlists, end to end."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.bridge.harness import CHAN, CHAN2, OTHER_CHAN, OTHER_GUILD, OWNER, PERSON, Harness, running

FRIEND = "500000000000000009"


def reasons(h: Harness, ids: list[str]) -> list[str | None]:
    """The drop reason of each delivery, or its first outcome when it was not dropped."""
    first: dict[str, dict[str, Any]] = {}
    for r in h.receipts():
        first.setdefault(r["delivery_id"], r)
    return [first[i].get("reason") if first[i]["outcome"] == "dropped" else first[i]["outcome"] for i in ids]


def finished(h: Harness, ids: list[str]) -> bool:
    return all(any(o in ("settled", "dropped") for o in h.outcomes(i)) for i in ids)


@pytest.mark.parametrize(
    ("overrides", "owner_turn", "stranger_turn", "friend_turn"),
    [
        ({"CLANKIE_DISCORD_DM_POLICY": "deny"}, "dm_denied", "dm_denied", "dm_denied"),
        # no owner id configured: the application's owner (from /oauth2/applications/@me) is the owner
        ({"CLANKIE_DISCORD_DM_POLICY": "owner_only"}, "accepted", "dm_not_owner", "dm_not_owner"),
        ({"CLANKIE_DISCORD_DM_POLICY": "owner_only", "CLANKIE_DISCORD_OWNER_ID": FRIEND}, "dm_not_owner", "dm_not_owner", "accepted"),
        ({"CLANKIE_DISCORD_DM_POLICY": "allowlist", "CLANKIE_DISCORD_DM_USER_IDS": FRIEND}, "dm_not_allowlisted", "dm_not_allowlisted", "accepted"),
    ],
)
def test_dm_policies(env: dict[str, str], overrides: dict[str, str], owner_turn: str, stranger_turn: str, friend_turn: str) -> None:
    """Each DM policy admits exactly the people it names; refused DMs load nothing and post nothing."""

    async def main() -> None:
        async with running(env, overrides=overrides) as h:
            ids = []
            for who in (OWNER, PERSON, FRIEND):
                m = await h.fake.message(h.fake.dm_channel(who), "psst", author_id=who)
                ids.append(m["id"])
            expected = [owner_turn, stranger_turn, friend_turn]
            admitted = expected.count("accepted")
            await h.until(lambda: finished(h, ids))
            assert reasons(h, ids) == expected
            assert len(h.service.submits) == admitted
            assert len(h.fake.posts) == admitted
            assert not any(c.route == "GET /channels/{id}/messages" for c in h.fake.calls)

    asyncio.run(main())


def test_guild_and_channel_allowlists(env: dict[str, str]) -> None:
    """Bots are ignored, an unlisted guild is refused, and a channel list narrows the listed guild."""

    async def main() -> None:
        async with running(env, overrides={"CLANKIE_DISCORD_CHANNEL_IDS": CHAN}) as h:
            bot = await h.fake.message(CHAN, "beep", author_id="600000000000000001", bot=True)
            other = await h.fake.message(OTHER_CHAN, "hello", author_id=PERSON, guild_id=OTHER_GUILD)
            unlisted = await h.fake.message(CHAN2, "hello", author_id=PERSON)
            listed = await h.fake.message(CHAN, "hello", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(listed["id"]))
            assert reasons(h, [bot["id"], other["id"], unlisted["id"]]) == [
                "self_or_bot_message", "guild_not_allowlisted", "channel_not_allowlisted",
            ]
            assert [s.delivery_id for s in h.service.submits] == [listed["id"]]
            assert [p.channel_id for p in h.fake.posts] == [CHAN]

    asyncio.run(main())


def test_empty_channel_list_admits_every_channel_of_a_listed_guild_only(env: dict[str, str]) -> None:
    """With no channel list, every channel of an allowlisted guild is read, and no other guild is."""

    async def main() -> None:
        async with running(env) as h:
            a = await h.fake.message(CHAN, "one", author_id=PERSON)
            b = await h.fake.message(CHAN2, "two", author_id=PERSON)
            c = await h.fake.message(OTHER_CHAN, "three", author_id=PERSON, guild_id=OTHER_GUILD)
            await h.until(lambda: "settled" in h.outcomes(a["id"]) and "settled" in h.outcomes(b["id"]))
            assert reasons(h, [c["id"]]) == ["guild_not_allowlisted"]
            assert len(h.fake.posts) == 2

    asyncio.run(main())
