"""Turns per person and per room: a spammer is slowed, visibly, and nobody else is (bridge/fairness.py)."""

from __future__ import annotations

import asyncio

from bridge.admission import Drop, Ingress, Paced, Policy, Run, Waiting
from bridge.fairness import Buckets, Fairness, Pace
from bridge.inbound import Inbound
from clankie import ipc
from clankie.protocol import TurnResult, TurnSubmit
from clankie.testing.clock import FakeClock
from tests.bridge.harness import CHAN, CHAN2, OWNER, PERSON, running
from tests.bridge.test_e2e_bounds import closing

OTHER = "500000000000000009"
HOURGLASS = "\u23f3"


def msg(mid: str, *, channel: str = "11", author: str = "7", guild: str | None = "1") -> Inbound:
    return Inbound(message_id=mid, channel_id=channel, guild_id=guild, author_id=author, text="hi")


def test_a_bucket_holds_a_minutes_worth_and_refills_continuously() -> None:
    """Six a minute: six at once, the seventh refused, one more ten seconds later."""
    b = Buckets(6)
    for _ in range(6):
        assert b.allows("u", 0.0)
        b.take("u", 0.0)
    assert not b.allows("u", 0.0) and not b.allows("u", 9.9)
    assert b.allows("u", 10.0)


def test_zero_is_no_limit_and_full_buckets_are_forgotten() -> None:
    """0 turns pacing off; a bucket that has refilled is dropped, and no more than max_keys are kept."""
    off = Buckets(0)
    for _ in range(1000):
        off.take("u", 0.0)
    assert off.allows("u", 0.0) and len(off) == 0
    b = Buckets(6, max_keys=3)
    for i in range(10):
        b.take(f"u{i}", float(i))
    assert len(b) == 3  # the bound
    b.take("late", 1000.0)
    assert len(b) == 1  # everyone else refilled long ago: forgotten


def test_the_hourglass_shows_once_a_minute_per_person() -> None:
    """A refused person gets one ⏳ a minute, however often they are refused, even when the room's bucket refused."""
    f = Fairness(1, 0)
    assert f.admit("1", "11", "7", 0.0) is Pace.GO and f.admit("1", "12", "7", 1.0) is Pace.PERSON
    assert [f.hint("1", "7", t) for t in (1.0, 2.0, 59.0, 61.5)] == [True, False, False, True]
    rooms = Fairness(0, 1)
    assert rooms.admit("1", "11", "7", 0.0) is Pace.GO and rooms.admit("1", "11", "8", 0.0) is Pace.ROOM
    assert rooms.hint("1", "8", 0.0) and not rooms.hint("1", "8", 1.0)


def test_one_person_in_twenty_rooms_starts_six_turns_a_minute_and_others_are_untouched() -> None:
    """The person's bucket spans rooms: six run, a minute's worth more wait for the pace (bridge.paced), the rest
    are refused (not remembered: a re-send later may run); another person runs."""
    ing = Ingress(Policy(guild_ids=frozenset({"1"}), owner_id="900", user_turns_per_minute=6, room_turns_per_minute=30))
    decisions = [ing.admit(msg(f"m{i}", channel=str(100 + i)), 0.0) for i in range(20)]
    assert sum(isinstance(d, Run) for d in decisions) == 6
    assert decisions[6:12] == [Paced(unprompted=True, person="1:7", opened=True)] * 6
    assert decisions[12:] == [Drop("rate_limited")] * 8
    assert ing.seen("m6") and not ing.seen("m12")
    assert isinstance(ing.admit(msg("o1", channel="100", author="8"), 0.0), Run)
    assert ing.paced.release(9.9) == []
    assert ing.paced.release(10.0) == [("106", ["m6"])]  # a token came back: the oldest waiting turn goes


def test_steered_buffered_waiting_owner_and_room_limits() -> None:
    """A steer costs its author half a turn (two steers past the pace, it waits); the owner is not paced; a message
    that waits for a slot counts; a room's own bucket holds its turns whoever speaks."""
    ing = Ingress(Policy(guild_ids=frozenset({"1"}), owner_id="900", user_turns_per_minute=2, room_turns_per_minute=2,
                         max_turns=1))
    assert isinstance(ing.admit(msg("a"), 0.0), Run)
    assert all(isinstance(ing.admit(msg(f"s{i}"), 0.0, live_run=True, turns=0), Run) for i in range(2))
    assert isinstance(ing.admit(msg("s2"), 0.0, live_run=True, turns=0), Paced)
    assert isinstance(ing.admit(msg("b", channel="12"), 0.0), Paced)  # behind s2, whatever the bucket says
    assert all(isinstance(ing.admit(msg(f"o{i}", author="900"), 0.0), Run) for i in range(3))
    assert ing.admit(msg("w", author="8"), 0.0, turns=1) == Waiting(unprompted=True)
    assert ing.admit(msg("x", author="9"), 0.0) == Drop("rate_limited")  # room 11: a and w spent its two


def test_a_spammer_is_slowed_while_another_person_and_the_owner_are_answered(env: dict[str, str]) -> None:
    """Through the real bridge: a held run and four steers spend three of the person's six turns; in the next room two
    turns run and the rest wait for the pace with ⏳ (one waiting turn); another person and the owner are answered at
    once in the same room; the waiting turn is answered when a token comes back, in one turn."""
    clock = FakeClock()
    release = asyncio.Event()

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        if sub.trigger.text == "hold":
            await release.wait()
        return TurnResult.settled("ok", turn_id=f"turn-{sub.delivery_id}")

    async def main() -> None:
        overrides = {"CLANKIE_USER_TURNS_PER_MINUTE": "6", "CLANKIE_ROOM_TURNS_PER_MINUTE": "100"}
        async with running(env, overrides=overrides, script=script, clock=clock) as h:
            held = str((await h.fake.message(CHAN, "hold", author_id=PERSON))["id"])
            await h.service.wait_submits(1)
            steered = [str((await h.fake.message(CHAN, f"and {i}", author_id=PERSON))["id"]) for i in range(4)]
            await h.until(lambda: len(h.service.submits) == 5)
            release.set()
            await h.until(lambda: all(closing(h, m) for m in [held, *steered]))
            mine = []
            for i in range(5):
                m = str((await h.fake.message(CHAN2, f"spam {i}", author_id=PERSON))["id"])
                await h.until(lambda m=m: bool(h.outcomes(m)))  # type: ignore[misc]  # bound per loop pass
                mine.append(m)
            assert [h.outcomes(m)[0] for m in mine] == ["accepted"] * 3 + ["waiting"] * 2
            other = str((await h.fake.message(CHAN2, "hello", author_id=OTHER))["id"])
            await h.until(lambda: closing(h, other) == ["settled"])
            owner = str((await h.fake.message(CHAN2, "the owner", author_id=OWNER))["id"])
            await h.until(lambda: closing(h, owner) == ["settled"])
            await h.until(lambda: all(h.fake.reactions.get(m) == [HOURGLASS] for m in mine[3:]))
            assert not any(closing(h, m) for m in mine[3:])
            clock.advance(10.0)  # one token back
            await h.until(lambda: all(closing(h, m) for m in mine))
            assert [closing(h, m) for m in mine] == [["settled"]] * 3 + [["absorbed"], ["settled"]]

    asyncio.run(main())
