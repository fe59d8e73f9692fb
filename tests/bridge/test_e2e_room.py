"""The room's experience through the real bridge and the fake Discord: one answer per burst (issue 16)."""

from __future__ import annotations

import asyncio
import functools

from clankie import ipc
from clankie.protocol import TurnResult, TurnSubmit
from clankie.testing.clock import FakeClock
from tests.bridge.harness import CHAN, OWNER, PERSON, Harness, running
from tests.bridge.test_e2e_turns import addressed, speak


def test_an_addressed_burst_after_two_declines_gets_exactly_one_answer(env: dict[str, str]) -> None:
    """With two declines behind him, a burst's tail arriving mid-run is steered, answered once, and never caught up."""
    clock = FakeClock()
    tail_decided = asyncio.Event()

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        if "clankie" in sub.trigger.text:
            return TurnResult(outcome="settled", turn_id="t0", text="hi!")
        if sub.trigger.text == "so the lobby":
            await tail_decided.wait()  # the owner's run is live while the tail arrives
            return TurnResult(outcome="settled", turn_id="t1", text="one answer for both")
        if sub.trigger.text == "is at eight":
            return TurnResult(outcome="absorbed", turn_id="t1")
        return TurnResult(outcome="silent", turn_id="t")

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
        return TurnResult(outcome="settled", turn_id="t0", text="something")
    return TurnResult(outcome="failed", turn_id="t1", code="captain_model_failed")


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
