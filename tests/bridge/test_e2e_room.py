"""The room's experience through the real bridge and the fake Discord (issue 16): one answer per burst,
the failure reaction, the tool-activity card."""

from __future__ import annotations

import asyncio
import functools

import pytest

from bridge.card import CARD_DELAY_S, EDIT_INTERVAL_S
from clankie import ipc
from clankie.protocol import HistoryRequest, ToolActivity, TurnResult, TurnSubmit
from clankie.testing.clock import FakeClock
from tests.bridge.harness import CHAN, OWNER, PERSON, Harness, running
from tests.bridge.test_e2e_turns import addressed, speak


def test_an_addressed_burst_after_two_declines_gets_exactly_one_answer(env: dict[str, str]) -> None:
    """With two declines behind him, a burst's tail arriving mid-run is steered, answered once, and never caught up."""
    clock = FakeClock()
    tail_decided = asyncio.Event()

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        if "clankie" in sub.trigger.text:
            return TurnResult.settled("hi!", turn_id="t0")
        if sub.trigger.text == "so the lobby":
            await tail_decided.wait()  # the owner's run is live while the tail arrives
            return TurnResult.settled("one answer for both", turn_id="t1")
        if sub.trigger.text == "is at eight":
            return TurnResult.absorbed(turn_id="t1")
        return TurnResult.silent(turn_id="t")

    async def main() -> None:
        h: Harness
        async with running(env, script=script, clock=clock, overrides=addressed(declines=3)) as h:
            say = functools.partial(speak, h)
            await say("hey clankie")
            d1, d2 = await say("meh"), await say("whatever")
            assert h.outcomes(d1)[-1] == h.outcomes(d2)[-1] == "silent"
            head = await h.fake.message(CHAN, "so the lobby", author_id=PERSON)
            await h.until(lambda: len(h.service.submits) == 4)
            tail = await h.fake.message(CHAN, "is at eight", author_id=PERSON)
            await h.until(lambda: len(h.outcomes(tail["id"])) >= 1)
            tail_decided.set()
            await h.until(lambda: "settled" in h.outcomes(head["id"]) and len(h.outcomes(tail["id"])) >= 2)
            assert h.outcomes(tail["id"]) == ["accepted", "absorbed"]
            ticks = clock.slept.count(30.0)
            clock.advance(30.0)
            await h.until(lambda: clock.slept.count(30.0) > ticks)  # the catch-up loop ran its tick and sleeps again
            assert len(h.service.submits) == 5
            assert [p.content for p in h.fake.posts_in(CHAN)] == ["hi!", "one answer for both"]

    asyncio.run(main())


async def failing(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
    if sub.trigger.text == "say something":
        return TurnResult.settled("something", turn_id="t0")
    return TurnResult.failed("captain_model_failed", turn_id="t1")


def test_an_addressed_failure_gets_one_reaction_and_an_unaddressed_one_stays_quiet(env: dict[str, str]) -> None:
    """A failed mention, reply to him or DM gets ⚠️ on its trigger and no text; chatter fails with nothing shown."""

    async def main() -> None:
        h: Harness
        async with running(env, script=failing) as h:
            chatter = await speak(h, "the servers are down")
            assert h.outcomes(chatter) == ["accepted", "failed"]
            mention = await speak(h, "are you there", mention_bot=True)
            assert h.outcomes(mention) == ["accepted", "reacted", "failed"]
            mine = await speak(h, "say something")
            (post,) = h.fake.posts_in(CHAN)
            reply = await speak(h, "and then?", reply_to=post.id)
            dm = await h.fake.message(h.fake.dm_channel(OWNER), "psst", author_id=OWNER)
            await h.until(lambda: "failed" in h.outcomes(dm["id"]))
            assert h.outcomes(reply) == h.outcomes(dm["id"]) == ["accepted", "reacted", "failed"]
            assert h.fake.reactions == {mention: ["\u26a0\ufe0f"], reply: ["\u26a0\ufe0f"], dm["id"]: ["\u26a0\ufe0f"]}
            assert [p.content for p in h.fake.posts] == ["something"]  # no text for any failure
            assert mine not in h.fake.reactions
            reacted = [r for r in h.receipts() if r["outcome"] == "reacted"]
            assert {r["reason"] for r in reacted} == {"captain_model_failed"}
            assert all(set(r) <= {"v", "at", "outcome", "delivery_id", "guild_id", "channel_id", "reason", "turn_id"}
                       for r in reacted)

    asyncio.run(main())


def test_an_empty_failure_reaction_setting_turns_the_reaction_off(env: dict[str, str]) -> None:
    """With ``CLANKIE_DISCORD_FAILURE_REACTION`` set empty, an addressed failure shows nothing at all."""

    async def main() -> None:
        h: Harness
        async with running(env, script=failing, overrides={"CLANKIE_DISCORD_FAILURE_REACTION": ""}) as h:
            mention = await speak(h, "are you there", mention_bot=True)
            assert h.outcomes(mention) == ["accepted", "failed"]
            assert h.fake.reactions == {} and h.fake.posts == []

    asyncio.run(main())


def test_a_turn_whose_shard_moved_to_another_tree_shows_nothing_in_the_room(env: dict[str, str]) -> None:
    """``captain_shard_moved``: another tree holds the room's shard now and answers the mention; this bridge closes
    the delivery failed with that code and adds no warning sign after the other tree's answer."""

    async def moved(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        return TurnResult.failed("captain_shard_moved", turn_id="t1")

    async def main() -> None:
        h: Harness
        async with running(env, script=moved) as h:
            mention = await speak(h, "are you there", mention_bot=True)
            assert h.outcomes(mention) == ["accepted", "failed"]
            assert h.fake.reactions == {} and h.fake.posts == []
            assert [r.get("reason") for r in h.receipts() if r["outcome"] == "failed"] == ["captain_shard_moved"]

    asyncio.run(main())


def test_a_reply_whose_rooms_shard_moved_while_the_turn_ran_is_not_posted(env: dict[str, str]) -> None:
    """The postgres profile fences the post too: a settled reply is posted only while the room's shard lease is this
    tree's. One whose shard moved while the turn ran (a pause past the lease, a handback past its bound) closes failed
    ``captain_shard_moved`` with no post and no sign: the new holder's drain answers it after reading the room."""
    ours = {"yes": True}

    async def moved_meanwhile(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        ours["yes"] = False  # the lease went while the model wrote
        return TurnResult.settled("late words", turn_id="t1")

    async def main() -> None:
        h: Harness
        async with running(env, script=moved_meanwhile) as h:
            h.app.bridge.room_ours = lambda room: ours["yes"]
            mention = await speak(h, "are you there", mention_bot=True)
            assert h.outcomes(mention) == ["accepted", "failed"]
            assert h.fake.posts == [] and h.fake.reactions == {}
            assert [r.get("reason") for r in h.receipts() if r["outcome"] == "failed"] == ["captain_shard_moved"]

    asyncio.run(main())


def tool(sub: TurnSubmit, call_id: str, name: str, host: str | None = None, *, active: bool = True) -> ToolActivity:
    return ToolActivity(delivery_id=sub.delivery_id, call_id=call_id, tool=name, host=host, active=active)


@pytest.mark.parametrize(
    ("ending", "posted"),
    [
        (TurnResult.settled("here it is", turn_id="t"), ["here it is"]),
        (TurnResult.silent(turn_id="t"), []),
        (TurnResult.failed("captain_model_failed", turn_id="t"), []),
    ],
)
def test_a_slow_tool_turn_shows_the_card_edits_it_and_removes_it_at_the_end(
    env: dict[str, str], ending: TurnResult, posted: list[str]
) -> None:
    """After 2 s in tools the card appears threaded to the trigger, follows the tool once 2 s later, and is gone at the end."""
    clock = FakeClock()
    h: Harness

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        armed = len(clock.slept)
        await conn.notify("tool", tool(sub, "c1", "browser_screenshot", "example.com"))
        await h.until(lambda: CARD_DELAY_S in clock.slept[armed:])
        assert h.fake.posts == []  # not before 2 s
        clock.advance(CARD_DELAY_S)
        await h.until(lambda: len(h.fake.posts) == 1)
        armed = len(clock.slept)
        await conn.notify("tool", tool(sub, "c1", "browser_screenshot", active=False))
        await conn.notify("tool", tool(sub, "c2", "draw_er_diagram"))
        await h.until(lambda: EDIT_INTERVAL_S in clock.slept[armed:])
        assert h.fake.edits == []  # at most one write per 2 s
        clock.advance(EDIT_INTERVAL_S)
        await h.until(lambda: len(h.fake.edits) == 1)
        return ending

    async def main() -> None:
        nonlocal h
        async with running(env, script=script, clock=clock) as h:
            trigger = await speak(h, "show me example.com", mention_bot=True)
            card = h.fake.posts[0]
            assert card.content == "Taking a screenshot of example.com\u2026"
            assert str(card.message_reference["message_id"]) == trigger  # type: ignore[index]  # a reply always carries its reference
            assert h.fake.edits == [(card.id, "Drawing a diagram\u2026")]
            assert h.fake.deleted == [card.id]
            assert [p.content for p in h.fake.live_posts(CHAN)] == posted
            assert h.fake.typing_in(CHAN) == 0  # only tools ran: no typing

    asyncio.run(main())


def test_an_unsolicited_tool_turn_gets_no_card_and_no_typing(env: dict[str, str]) -> None:
    """A turn he was not addressed in may use tools for as long as it likes without announcing it."""
    clock = FakeClock()
    h: Harness
    armed: list[int] = []

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        armed.append(len(clock.slept))
        await conn.notify("tool", tool(sub, "c1", "browser_screenshot", "example.com"))
        # a round trip on the same connection: the notification has been handled when it returns
        await conn.request("history", HistoryRequest(delivery_id=sub.delivery_id, room=sub.room, limit=1))
        assert CARD_DELAY_S not in clock.slept[armed[0]:] and not h.app.bridge.cards.live
        clock.advance(10 * CARD_DELAY_S)
        return TurnResult.settled("neat link", turn_id="t")

    async def main() -> None:
        nonlocal h
        async with running(env, script=script, clock=clock) as h:
            await speak(h, "look at https://example.com/x")
            assert [p.content for p in h.fake.posts] == ["neat link"]
            assert h.fake.edits == [] and h.fake.deleted == []
            assert h.fake.typing_in(CHAN) == 0

    asyncio.run(main())


def test_the_card_setting_turns_cards_off(env: dict[str, str]) -> None:
    """With ``CLANKIE_DISCORD_TOOL_CARD=false`` a slow requested tool turn shows nothing until its reply."""
    clock = FakeClock()
    h: Harness

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        armed = len(clock.slept)
        await conn.notify("tool", tool(sub, "c1", "draw_sequence_diagram"))
        await conn.request("history", HistoryRequest(delivery_id=sub.delivery_id, room=sub.room, limit=1))
        assert CARD_DELAY_S not in clock.slept[armed:] and not h.app.bridge.cards.live
        return TurnResult.settled("drawn", turn_id="t")

    async def main() -> None:
        nonlocal h
        async with running(env, script=script, clock=clock, overrides={"CLANKIE_DISCORD_TOOL_CARD": "false"}) as h:
            await speak(h, "draw it", mention_bot=True)
            assert [p.content for p in h.fake.posts] == ["drawn"]

    asyncio.run(main())
