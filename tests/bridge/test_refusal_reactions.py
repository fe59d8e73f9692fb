"""Refusal reactions are bounded: under a flood of refusals at most ``MAX_REFUSAL_REACTIONS`` are in flight to
Discord, the rest go without a reaction (their ``dropped`` receipts still say why), and the slots free as Discord
answers. A backpressure refusal past that bound still reaches its author, by a room notice (bridge.refusal_notice)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bridge.port import DiscordPort
from bridge.refusal_notice import NOTICE, NOTICE_INTERVAL, SIGNS, NoticeGate
from bridge.turns import MAX_REFUSAL_REACTIONS
from clankie import ipc
from clankie.metrics import METER
from clankie.protocol import TurnResult, TurnSubmit
from clankie.testing.clock import FakeClock
from clankie.testing.fake_discord import FakeDiscord
from clankie.testing.fake_discord_records import Post
from tests.bridge.harness import CHAN, CHAN2, GUILD, PERSON, Harness, running


class HeldReactions:
    """The bridge's real Discord port, with every reaction held until ``release`` is set."""

    def __init__(self, port: DiscordPort, release: asyncio.Event) -> None:
        self.port = port
        self.release = release
        self.waiting = 0

    async def react(self, channel_id: str, message_id: str, emoji: str) -> None:
        self.waiting += 1
        await self.release.wait()
        await self.port.react(channel_id, message_id, emoji)


def test_a_flood_of_refusals_holds_at_most_the_bound_of_reactions_and_frees_them(env: dict[str, str]) -> None:
    async def main() -> None:
        async with running(env) as h:
            bridge = h.app.bridge
            ids = [str((await h.fake.message(CHAN, f"m{i}"))["id"]) for i in range(MAX_REFUSAL_REACTIONS + 8)]
            release = asyncio.Event()
            held = HeldReactions(bridge.port, release)
            bridge.port = held  # type: ignore[assignment]  # the port is read when each reaction starts
            for message_id in ids:
                bridge._react_refused(CHAN, message_id, "❌")
            await h.until(lambda: held.waiting == MAX_REFUSAL_REACTIONS, what="the bound of reactions in flight")
            assert len(bridge._reactions) == MAX_REFUSAL_REACTIONS
            release.set()
            await h.until(lambda: len(bridge._reactions) == 0, what="every held reaction answered")
            reacted = [m for m in ids if h.fake.reactions.get(m)]
            assert reacted == ids[:MAX_REFUSAL_REACTIONS]  # the first ones, in order; the rest went without
            bridge._react_refused(CHAN, ids[-1], "❌")  # a slot is free again
            await h.until(lambda: h.fake.reactions.get(ids[-1]) == ["❌"], what="a reaction after the flood")

    asyncio.run(main())


class HeldReacts:
    """The bridge's real Discord port with every reaction held until ``release`` is set; everything else passes."""

    def __init__(self, port: DiscordPort, release: asyncio.Event) -> None:
        self._port = port
        self.release = release
        self.waiting = 0

    async def react(self, channel_id: str, message_id: str, emoji: str) -> None:
        self.waiting += 1
        await self.release.wait()
        await self._port.react(channel_id, message_id, emoji)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._port, name)


def _replies_to(post: Post) -> str:
    return str((post.message_reference or {}).get("message_id"))


def _counted(code: str, sign: str) -> float:
    report = METER.report()
    assert report is not None
    return sum(s.value for s in report.counters.get("clankie_refusal_signs_total", ()) if s.labels == (code, sign))


def test_past_the_reaction_bound_a_journal_full_refusal_reaches_its_author_by_a_room_notice(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the journal full and MAX_REFUSAL_REACTIONS reactions in flight, the next refused message gets a notice
    replying to it; the room's later refusals within NOTICE_INTERVAL are covered by it (no second post), another
    room gets its own (a room that refuses the post is not asked again within the interval), and once the interval
    has passed the room gets a new one. Each sign is counted."""
    monkeypatch.setattr(METER, "enabled", True)
    h: Harness  # bound by main(); the helpers read it
    clock = FakeClock()
    release_turns, release_reacts = asyncio.Event(), asyncio.Event()
    third, fourth = "399", "398"
    fake = FakeDiscord(guilds={GUILD: [CHAN, CHAN2, third, fourth]})

    async def held(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        await release_turns.wait()
        return TurnResult.settled(f"done {sub.delivery_id}", turn_id=f"turn-{sub.delivery_id}")

    def notices() -> list[Post]:
        return [p for p in h.fake.posts if p.content == NOTICE]

    async def refused(channel: str, text: str) -> str:
        m = await h.fake.message(channel, text, author_id=PERSON)
        await h.until(lambda: "dropped" in h.outcomes(str(m["id"])), what=f"{text} refused")
        assert [(r["outcome"], r.get("reason")) for r in h.receipts() if r["delivery_id"] == str(m["id"])] == [
            ("dropped", "journal_full")]
        return str(m["id"])

    overrides = {"CLANKIE_DISCORD_MAX_TURNS": "1", "CLANKIE_DISCORD_JOURNAL_MAX_BYTES": "65536"}
    before = {sign: _counted("journal_full", sign) for sign in SIGNS}

    async def main() -> None:
        nonlocal h
        async with running(env, overrides=overrides, script=held, clock=clock, fake=fake) as h:
            await h.fake.message(CHAN, "one", author_id=PERSON)
            await h.service.wait_submits(1)
            waited = 0
            while not h.app.journal.full:  # fill the journal with messages waiting for the one turn slot
                m = await h.fake.message(CHAN2, "x" * 400 + f" {waited}", author_id=PERSON)
                await h.until(lambda m=m: "waiting" in h.outcomes(str(m["id"])))  # type: ignore[misc]  # bound per pass
                waited += 1
                assert waited < 1000, "the journal never reached its bound"
            bridge = h.app.bridge
            port = HeldReacts(bridge.port, release_reacts)
            bridge.port = port  # read when each reaction and notice starts
            for i in range(MAX_REFUSAL_REACTIONS):
                await refused(CHAN2, f"reacted {i}")
            await h.until(lambda: port.waiting == MAX_REFUSAL_REACTIONS, what="the bound of reactions in flight")
            assert not notices()

            first = await refused(CHAN2, "past the bound")
            await h.until(lambda: len(notices()) == 1, what="a notice for the refusal past the bound")
            (notice,) = notices()
            assert notice.channel_id == CHAN2 and _replies_to(notice) == first
            assert notice.allowed_mentions == {"parse": []}

            await refused(CHAN2, "covered")  # the same room within the interval: the notice already said it
            assert len(bridge._notices) == 0 and len(notices()) == 1
            elsewhere = await refused(third, "another room")
            await h.until(lambda: len(notices()) == 2, what="the other room's own notice")
            assert (notices()[1].channel_id, _replies_to(notices()[1])) == (third, elsewhere)

            h.fake.fail("POST /channels/{id}/messages", 403)  # a room he may not post in: refused, not tried again
            await refused(fourth, "a room that refuses posts")
            await h.until(lambda: _counted("journal_full", "none") - before["none"] == 1, what="the refused notice")
            await refused(fourth, "again there")  # covered: a 4xx would be refused again
            assert len(bridge._notices) == 0 and len(notices()) == 2

            clock.advance(NOTICE_INTERVAL)
            later = await refused(CHAN2, "after the interval")
            await h.until(lambda: len(notices()) == 3, what="a new notice once the interval has passed")
            assert (notices()[2].channel_id, _replies_to(notices()[2])) == (CHAN2, later)
            assert port.waiting == MAX_REFUSAL_REACTIONS  # none of these took a reaction

            def counted() -> dict[str, float]:
                return {sign: _counted("journal_full", sign) - before[sign] for sign in SIGNS}

            expected = {"reaction": MAX_REFUSAL_REACTIONS, "notice": 3, "covered": 2, "none": 1}
            await h.until(lambda: counted() == expected, what=f"the signs counted as {expected}")
            release_reacts.set()
            await h.until(lambda: len(bridge._reactions) == 0, what="every held reaction answered")
            release_turns.set()

    asyncio.run(main())


def test_the_notice_gate_covers_a_room_for_its_interval_and_remembers_a_bounded_number_of_rooms() -> None:
    """One notice per room per interval; past max_rooms no notice (``none``) until a room's interval ends; a room
    whose notice failed may try again at once."""
    gate = NoticeGate(interval=300.0, max_rooms=2)
    assert [gate.decide("a", 0.0), gate.decide("a", 10.0), gate.decide("b", 20.0), gate.decide("c", 30.0)] == [
        "notice", "covered", "notice", "none"]
    assert gate.decide("a", 299.9) == "covered" and len(gate) == 2
    assert gate.decide("c", 300.0) == "notice" and gate.decide("a", 300.0) == "none"  # a's interval ended; b and c hold both
    gate.failed("c")
    assert gate.decide("c", 301.0) == "notice"
    with pytest.raises(ValueError):
        NoticeGate(interval=0.0)
