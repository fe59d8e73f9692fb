"""Turns as the service sees them: typing, text updates, history, reconnects, duplicates, catch-up."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest

from bridge.typing_loop import TYPING_BACKSTOP_S, TYPING_REFRESH_S
from clankie import ipc, paths
from clankie.errors import RemoteError
from clankie.protocol import HistoryReply, HistoryRequest, TextUpdate, TextUpdateReply, TurnResult, TurnSubmit, TypingSignal
from clankie.testing.clock import FakeClock
from tests.bridge.harness import CHAN, CHAN2, OWNER, PERSON, FakeService, Harness, running


def addressed(declines: int) -> dict[str, str]:
    """Settings for reply policy `addressed`: drift after ``declines`` silences, catch up every 30 s."""
    return {
        "CLANKIE_DISCORD_REPLY_POLICY": "addressed",
        "CLANKIE_DISCORD_ENGAGEMENT_DECLINES": str(declines),
        "CLANKIE_DISCORD_CATCH_UP_SECONDS": "30",
    }


async def speak(h: Harness, text: str, **kw: Any) -> str:
    """A person says ``text`` in the room; returns its id once the bridge has decided what to do with it."""
    m = await h.fake.message(CHAN, text, author_id=PERSON, **kw)
    await h.until(lambda: len(h.outcomes(m["id"])) >= 1 and h.outcomes(m["id"])[-1] != "accepted")
    return str(m["id"])


def test_typing_lights_a_spoken_turn_until_it_settles(env: dict[str, str]) -> None:
    """The service's typing signal shows typing while the turn runs; it stops when the reply lands."""
    h: Harness  # bound by main(); the script it runs reads it
    clock = FakeClock()

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        if sub.trigger.text == "thanks":
            return TurnResult.silent(turn_id="t2")
        await conn.notify("typing", TypingSignal(delivery_id=sub.delivery_id))
        await conn.notify("typing", TypingSignal(delivery_id=sub.delivery_id))  # a second signal adds no loop
        await h.until(lambda: h.fake.typing_in(CHAN) >= 1 and clock.sleepers >= 1)
        clock.advance(8.0)  # one refresh while still composing
        await h.until(lambda: h.fake.typing_in(CHAN) >= 2)
        return TurnResult.settled("sure", turn_id="t")

    async def main() -> None:
        nonlocal h
        async with running(env, script=script, clock=clock) as h:
            m = await h.fake.message(CHAN, "can you", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(m["id"]))
            assert h.fake.typing_in(CHAN) == 2
            await h.until(lambda: clock.sleepers == 0)  # the refresh loop is gone, not just waiting
            clock.advance(60.0)
            await h.fake.message(CHAN, "thanks", author_id=PERSON)  # a round trip through the loop
            await h.until(lambda: len(h.service.submits) == 2)
            assert h.fake.typing_in(CHAN) == 2

    asyncio.run(main())


def test_silent_turn_never_types_and_posts_nothing(env: dict[str, str]) -> None:
    """A turn that ends in silence shows no typing and posts nothing; a typing for an unheld delivery is ignored."""

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        await conn.notify("typing", TypingSignal(delivery_id="123456"))  # not a delivery the bridge holds
        return TurnResult.silent(turn_id="t")

    async def main() -> None:
        async with running(env, script=script) as h:
            m = await h.fake.message(CHAN, "lol", author_id=PERSON)
            await h.until(lambda: "silent" in h.outcomes(m["id"]))
            assert h.fake.typing_in(CHAN) == 0
            assert h.fake.posts == []

    asyncio.run(main())


def test_typing_works_in_a_dm(env: dict[str, str]) -> None:
    """An owner's DM turn lights typing in the DM channel and the reply is threaded to the DM."""
    h: Harness  # bound by main(); the script it runs reads it

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        await conn.notify("typing", TypingSignal(delivery_id=sub.delivery_id))
        await h.until(lambda: h.fake.typing_in(sub.room.channel_id) >= 1)
        return TurnResult.settled("sure thing", turn_id="t")

    async def main() -> None:
        nonlocal h
        async with running(env, script=script) as h:
            dm = h.fake.dm_channel(OWNER)
            m = await h.fake.message(dm, "you around?", author_id=OWNER)
            await h.until(lambda: "settled" in h.outcomes(m["id"]))
            [post] = h.fake.posts
            assert post.channel_id == dm and str(post.message_reference["message_id"]) == m["id"]  # type: ignore[index]  # a reply always carries its reference
            assert h.service.submits[0].room.guild_id is None

    asyncio.run(main())


def test_text_update_and_history_are_served_on_the_same_connection(env: dict[str, str]) -> None:
    """Mid-turn the service reads the room's recent messages and posts one short threaded update."""
    seen: dict[str, object] = {}

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        hist = await conn.request("history", HistoryRequest(delivery_id=sub.delivery_id, room=sub.room, limit=2))
        assert isinstance(hist, HistoryReply)
        seen["history"] = [m.text for m in hist.messages]
        upd = await conn.request("text_update", TextUpdate(delivery_id=sub.delivery_id, text="hang on, looking @everyone"))
        assert isinstance(upd, TextUpdateReply)
        seen["update"] = upd.message_id
        try:
            await conn.request("text_update", TextUpdate(delivery_id="999", text="not mine"))
        except RemoteError as exc:
            seen["unheld"] = exc.code
        return TurnResult.settled("found it", turn_id="t")

    async def main() -> None:
        async with running(env, script=script, overrides={"CLANKIE_DISCORD_REPLY_POLICY": "all"}) as h:
            h.fake.messages[CHAN] = []
            for t in ("first", "second", "third"):
                h.fake.messages[CHAN].append(
                    h.fake._message_payload(h.fake.snowflake(), CHAN, "100", {"id": PERSON, "username": "p"}, t)
                )
            m = await h.fake.message(CHAN, "look it up", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(m["id"]))
            assert seen["history"] == ["second", "third"]  # the last two before the trigger, oldest first
            assert seen["unheld"] == "delivery_not_held"
            update, reply = h.fake.posts
            assert update.id == seen["update"] and update.content == "hang on, looking @everyone"
            assert update.allowed_mentions == {"parse": []} and update.files == []
            assert str(update.message_reference["message_id"]) == m["id"]  # type: ignore[index]  # a reply always carries its reference
            assert reply.content == "found it"

    asyncio.run(main())


def test_text_update_is_refused_in_a_dm(env: dict[str, str]) -> None:
    """A text update for a DM turn is refused and posts nothing; the turn still settles."""
    codes: list[str] = []

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        try:
            await conn.request("text_update", TextUpdate(delivery_id=sub.delivery_id, text="one sec"))
        except RemoteError as exc:
            codes.append(exc.code)
        return TurnResult.settled("ok", turn_id="t")

    async def main() -> None:
        async with running(env, script=script) as h:
            m = await h.fake.message(h.fake.dm_channel(OWNER), "hey", author_id=OWNER)
            await h.until(lambda: "settled" in h.outcomes(m["id"]))
            assert codes == ["dm_not_allowed"]
            assert [p.content for p in h.fake.posts] == ["ok"]

    asyncio.run(main())


def test_service_killed_mid_turn_resubmits_by_id_and_replies_once(env: dict[str, str]) -> None:
    """The service dies while a turn runs: the bridge reconnects, re-submits the same delivery, and replies once."""
    never = asyncio.Event()

    async def hang(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        await never.wait()
        raise AssertionError("unreachable")

    async def main() -> None:
        async with running(env, script=hang) as h:
            m = await h.fake.message(CHAN, "long job", author_id=PERSON)
            await h.service.wait_submits(1)
            await h.service.close()  # the service process is gone
            second = FakeService(paths.socket_path(h.app.settings.runtime_dir, "service"))
            await second.start()
            try:
                await h.until(lambda: "settled" in h.outcomes(m["id"]))
                assert [s.delivery_id for s in second.submits] == [m["id"]]
                assert second.submits[0] == h.service.submits[0]
                assert len(h.fake.posts) == 1
                assert h.outcomes(m["id"]) == ["accepted", "settled"]
                assert h.app.heartbeat().report["resubmits"] == 1
            finally:
                await second.close()

    asyncio.run(main())


def test_duplicate_delivery_gets_one_turn_and_one_reply(env: dict[str, str]) -> None:
    """Discord delivering the same message twice yields one turn, one reply, and a deduplicated receipt."""
    release = asyncio.Event()

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        await release.wait()
        return TurnResult.settled("once", turn_id="t")

    async def main() -> None:
        async with running(env, script=script) as h:
            m = await h.fake.message(CHAN, "hi", author_id=PERSON)
            await h.service.wait_submits(1)
            await h.fake.redeliver(m)
            await h.until(lambda: "deduplicated" in h.outcomes(m["id"]))
            release.set()
            await h.until(lambda: "settled" in h.outcomes(m["id"]))
            await h.fake.redeliver(m)  # after it settled, too
            await h.until(lambda: h.outcomes(m["id"]).count("deduplicated") == 2)
            assert len(h.service.submits) == 1 and len(h.fake.posts) == 1
            changed = {**m, "content": "edited text"}
            await h.fake.redeliver(changed)
            await h.until(lambda: any(r.get("reason") == "delivery_id_conflict" for r in h.receipts()))

    asyncio.run(main())


def test_declined_room_ages_out_and_buffered_room_is_caught_up_in_one_turn(env: dict[str, str]) -> None:
    """Under `addressed`, declines age a room out; its buffered chatter is answered later in one untyped turn."""
    clock = FakeClock()
    typing_refused: list[str] = []

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        if "clankie" in sub.trigger.text or sub.backlog:
            if sub.backlog:
                await conn.notify("typing", TypingSignal(delivery_id=sub.delivery_id))
                typing_refused.append(sub.delivery_id)
            return TurnResult.settled("caught up" if sub.backlog else "hi!", turn_id="t")
        return TurnResult.silent(turn_id="t")

    overrides = addressed(declines=2)

    async def main() -> None:
        async with running(env, script=script, clock=clock, overrides=overrides) as h:
            say = functools.partial(speak, h)
            before = await say("random chatter")
            assert h.outcomes(before) == ["dropped"]  # never engaged: not addressed
            first = await say("hey clankie")
            assert h.outcomes(first) == ["accepted", "settled"]
            d1, d2 = await say("meh"), await say("whatever")
            assert h.outcomes(d1)[-1] == h.outcomes(d2)[-1] == "silent"
            b1, b2, b3 = await say("so anyway"), await say("did you see"), await say("the game")
            assert [h.outcomes(b)[-1] for b in (b1, b2, b3)] == ["buffered"] * 3
            assert len(h.service.submits) == 3
            clock.advance(30.0)
            await h.until(lambda: "settled" in h.outcomes(b3))
            catch_up = h.service.submits[-1]
            assert catch_up.delivery_id == b3 and catch_up.trigger.unprompted
            assert [m.text for m in catch_up.backlog] == ["so anyway", "did you see"]
            assert len(h.service.submits) == 4
            assert str(h.fake.posts[-1].message_reference["message_id"]) == b3  # type: ignore[index]  # a reply always carries its reference
            assert h.fake.typing_in(CHAN) == 0 and typing_refused == [b3]  # catch-up never types
            clock.advance(30.0)  # an idle tick starts nothing
            after = await say("back in the conversation")
            assert h.outcomes(after)[-1] == "silent"  # engaged again: read live
            assert len(h.service.submits) == 5

    asyncio.run(main())


@pytest.mark.parametrize("code", [4000])
def test_gateway_drop_resumes_and_keeps_listening(env: dict[str, str], code: int) -> None:
    """After the gateway drops, discord.py resumes and a message sent meanwhile is still answered."""

    async def main() -> None:
        async with running(env) as h:
            await h.fake.close_gateway(code)
            m = await h.fake.message(CHAN, "still there?", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(m["id"]), timeout=20)
            assert h.fake.resumes >= 1
            assert h.app.discord_status == "connected"

    asyncio.run(main())


def test_typing_stops_at_the_first_failed_post_and_the_turn_still_settles(env: dict[str, str]) -> None:
    """A typing post Discord refuses ends the indicator quietly; the reply still goes out."""
    h: Harness  # bound by main(); the script it runs reads it
    clock = FakeClock()

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        await conn.notify("typing", TypingSignal(delivery_id=sub.delivery_id))
        held = h.app.bridge.turns.get(sub.delivery_id)
        assert held is not None
        await h.until(lambda: held.typing is not None and held.typing.done())  # the loop ended by itself
        clock.advance(30.0)
        return TurnResult.settled("done anyway", turn_id="t")

    async def main() -> None:
        nonlocal h
        async with running(env, script=script, clock=clock) as h:
            h.fake.fail("POST /channels/{id}/typing", 403)
            m = await h.fake.message(CHAN, "go", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(m["id"]))
            assert [c.status for c in h.fake.calls if c.route == "POST /channels/{id}/typing"] == [403]
            assert [p.content for p in h.fake.posts] == ["done anyway"]

    asyncio.run(main())


def test_images_are_carried_and_an_unreadable_attachment_alone_is_empty(env: dict[str, str]) -> None:
    """Scenario 42: a caption-less image is a turn carrying the image; blank text with only a PDF is dropped."""
    image = {"id": "1", "filename": "cat.png", "size": 2048, "url": "https://cdn.example/cat.png",
             "proxy_url": "", "content_type": "image/png"}
    pdf = {"id": "2", "filename": "doc.pdf", "size": 4096, "url": "https://cdn.example/doc.pdf",
           "proxy_url": "", "content_type": "application/pdf"}

    async def main() -> None:
        async with running(env) as h:
            pic = await h.fake.message(CHAN, "", author_id=PERSON, attachments=[image])
            doc = await h.fake.message(CHAN, "   ", author_id=PERSON, attachments=[pdf])
            await h.until(lambda: "settled" in h.outcomes(pic["id"]) and bool(h.outcomes(doc["id"])))
            [sub] = h.service.submits
            assert sub.trigger.text == ""
            assert [(a.filename, a.content_type, a.size) for a in sub.trigger.attachments] == [("cat.png", "image/png", 2048)]
            assert [r.get("reason") for r in h.receipts() if r["delivery_id"] == doc["id"]] == ["empty_message"]

    asyncio.run(main())


def test_typing_gives_up_at_the_backstop_for_a_turn_that_never_returns(env: dict[str, str]) -> None:
    """A turn that never comes back stops showing typing after 30 minutes, and leaves no refresh timer behind."""
    clock = FakeClock()
    never = asyncio.Event()

    async def hang(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        await conn.notify("typing", TypingSignal(delivery_id=sub.delivery_id))
        await never.wait()
        raise AssertionError("unreachable")

    async def main() -> None:
        async with running(env, script=hang, clock=clock) as h:
            m = await h.fake.message(CHAN, "think hard", author_id=PERSON)
            await h.until(lambda: h.fake.typing_in(CHAN) == 1 and clock.sleepers == 1)
            for n in (2, 3):  # still composing: refreshed every 8 s
                clock.advance(TYPING_REFRESH_S)
                await h.until(lambda: h.fake.typing_in(CHAN) == n and clock.sleepers == 1)  # noqa: B023 (awaited within the iteration)
            clock.advance(TYPING_BACKSTOP_S)
            held = h.app.bridge.turns.get(m["id"])
            assert held is not None
            await h.until(lambda: held.typing is not None and held.typing.done())
            assert clock.sleepers == 0  # no refresh timer left waiting
            shown = h.fake.typing_in(CHAN)
            clock.advance(10 * TYPING_REFRESH_S)
            await h.fake.message(CHAN2, "anyone?", author_id=PERSON)  # a round trip through the bridge's loop
            await h.service.wait_submits(2)
            assert h.fake.typing_in(CHAN) == shown <= 3
            assert h.outcomes(m["id"]) == ["accepted"]  # the backstop ends the indicator, not the turn

    asyncio.run(main())


def test_replies_in_two_rooms_go_to_their_own_triggers_when_the_second_settles_first(env: dict[str, str]) -> None:
    """Two rooms' turns overlap and the later one finishes first: each reply threads to its own message, evidence in settle order."""
    first_may_finish = asyncio.Event()

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        if sub.room.channel_id == CHAN:
            await first_may_finish.wait()
        return TurnResult.settled(f"answer for {sub.room.channel_id}", turn_id="t-" + sub.delivery_id)

    async def main() -> None:
        async with running(env, script=script) as h:
            m1 = await h.fake.message(CHAN, "first room", author_id=PERSON)
            await h.service.wait_submits(1)
            m2 = await h.fake.message(CHAN2, "second room", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(m2["id"]))
            assert h.outcomes(m1["id"]) == ["accepted"] and len(h.fake.posts) == 1
            first_may_finish.set()
            await h.until(lambda: "settled" in h.outcomes(m1["id"]))
            posts = {p.channel_id: p for p in h.fake.posts}
            assert len(h.fake.posts) == 2
            for chan, m in ((CHAN, m1), (CHAN2, m2)):
                assert posts[chan].content == f"answer for {chan}"
                assert str(posts[chan].message_reference["message_id"]) == m["id"]  # type: ignore[index]  # a reply always carries its reference
            settled = [r for r in h.receipts() if r["outcome"] == "settled"]
            assert [(r["delivery_id"], r["channel_id"]) for r in settled] == [(m2["id"], CHAN2), (m1["id"], CHAN)]
            assert [r["message_ids"] for r in settled] == [[posts[CHAN2].id], [posts[CHAN].id]]

    asyncio.run(main())


def test_a_buffered_image_without_words_reaches_the_catch_up_turn(env: dict[str, str]) -> None:
    """Scenario 42 under `addressed`: a caption-less picture posted while he is drifted is kept and answered at catch-up."""
    clock = FakeClock()
    image = {"id": "7", "filename": "meme.png", "size": 4096, "url": "https://cdn.example/meme.png",
             "proxy_url": "", "content_type": "image/png"}

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        if "clankie" in sub.trigger.text or sub.backlog or sub.trigger.attachments:
            return TurnResult.settled("nice picture", turn_id="t")
        return TurnResult.silent(turn_id="t")

    overrides = addressed(declines=1)

    async def main() -> None:
        async with running(env, script=script, clock=clock, overrides=overrides) as h:
            say = functools.partial(speak, h)
            assert h.outcomes(await say("hey clankie"))[-1] == "settled"
            assert h.outcomes(await say("meh"))[-1] == "silent"  # one decline: drifted
            words = await say("look at this")
            pic = await say("", attachments=[image])
            assert [h.outcomes(i) for i in (words, pic)] == [["buffered"], ["buffered"]]
            clock.advance(30.0)
            await h.until(lambda: "settled" in h.outcomes(pic))
            catch_up = h.service.submits[-1]
            assert catch_up.delivery_id == pic and catch_up.trigger.unprompted and catch_up.trigger.text == ""
            assert [(a.filename, a.content_type) for a in catch_up.trigger.attachments] == [("meme.png", "image/png")]
            assert [m.text for m in catch_up.backlog] == ["look at this"]
            assert str(h.fake.posts[-1].message_reference["message_id"]) == pic  # type: ignore[index]  # a reply always carries its reference

    asyncio.run(main())


def test_a_buffered_image_that_is_not_the_newest_keeps_its_picture_in_the_backlog(env: dict[str, str]) -> None:
    """Under `addressed`, a caption-less picture followed by words reaches the catch-up turn's backlog with its image."""
    clock = FakeClock()
    image = {"id": "8", "filename": "chart.png", "size": 4096, "url": "https://cdn.example/chart.png",
             "proxy_url": "", "content_type": "image/png"}
    pdf = {"id": "9", "filename": "doc.pdf", "size": 100, "url": "https://cdn.example/doc.pdf",
           "proxy_url": "", "content_type": "application/pdf"}

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        if "clankie" in sub.trigger.text or sub.backlog:
            return TurnResult.settled("nice chart", turn_id="t")
        return TurnResult.silent(turn_id="t")

    overrides = addressed(declines=1)

    async def main() -> None:
        async with running(env, script=script, clock=clock, overrides=overrides) as h:
            say = functools.partial(speak, h)
            assert h.outcomes(await say("hey clankie"))[-1] == "settled"
            assert h.outcomes(await say("meh"))[-1] == "silent"  # one decline: drifted
            pic = await say("", attachments=[image, pdf])
            words = await say("what do you make of that")
            assert [h.outcomes(i) for i in (pic, words)] == [["buffered"], ["buffered"]]
            clock.advance(30.0)
            await h.until(lambda: "settled" in h.outcomes(words))
            catch_up = h.service.submits[-1]
            assert catch_up.delivery_id == words and catch_up.trigger.attachments == ()
            (entry,) = catch_up.backlog
            assert entry.id == pic and entry.text == ""
            assert [(a.filename, a.content_type, a.size, a.url) for a in entry.attachments] == [
                ("chart.png", "image/png", 4096, "https://cdn.example/chart.png")
            ]

    asyncio.run(main())


def test_history_replies_carry_each_messages_images(env: dict[str, str]) -> None:
    """The room's recent messages read mid-turn say which pictures each carried (readable images only)."""
    seen: dict[str, object] = {}
    image = {"id": "5", "filename": "cat.png", "size": 2048, "url": "https://cdn.example/cat.png",
             "proxy_url": "", "content_type": "image/png"}
    pdf = {"id": "6", "filename": "doc.pdf", "size": 100, "url": "https://cdn.example/doc.pdf",
           "proxy_url": "", "content_type": "application/pdf"}

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        hist = await conn.request("history", HistoryRequest(delivery_id=sub.delivery_id, room=sub.room, limit=5))
        assert isinstance(hist, HistoryReply)
        seen["history"] = [(m.text, [a.filename for a in m.attachments]) for m in hist.messages]
        return TurnResult.settled("ok", turn_id="t")

    async def main() -> None:
        async with running(env, script=script, overrides={"CLANKIE_DISCORD_REPLY_POLICY": "all"}) as h:
            h.fake.messages[CHAN] = []
            for text, atts in (("plain", []), ("", [image, pdf])):
                payload = h.fake._message_payload(h.fake.snowflake(), CHAN, "100", {"id": PERSON, "username": "p"}, text)
                payload["attachments"] = atts
                h.fake.messages[CHAN].append(payload)
            m = await h.fake.message(CHAN, "what was that", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(m["id"]))
            assert seen["history"] == [("plain", []), ("", ["cat.png"])]

    asyncio.run(main())
