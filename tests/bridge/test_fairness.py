"""Turns per person and per room: a spammer is slowed, visibly, and nobody else is (bridge/fairness.py)."""

from __future__ import annotations

import asyncio

from bridge.admission import Drop, Ingress, Policy, Run, Waiting
from bridge.fairness import Buckets, Fairness
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
    assert f.admit("1", "11", "7", 0.0) and not f.admit("1", "12", "7", 1.0)
    assert [f.hint("1", "7", t) for t in (1.0, 2.0, 59.0, 61.5)] == [True, False, False, True]
    rooms = Fairness(0, 1)
    assert rooms.admit("1", "11", "7", 0.0) and not rooms.admit("1", "11", "8", 0.0)
    assert rooms.hint("1", "8", 0.0) and not rooms.hint("1", "8", 1.0)


def test_one_person_in_twenty_rooms_starts_six_turns_a_minute_and_others_are_untouched() -> None:
    """The person's bucket spans rooms; a refusal is not remembered (a re-send later runs); another person runs."""
    ing = Ingress(Policy(guild_ids=frozenset({"1"}), owner_id="900", user_turns_per_minute=6, room_turns_per_minute=30))
    decisions = [ing.admit(msg(f"m{i}", channel=str(100 + i)), 0.0) for i in range(20)]
    assert sum(isinstance(d, Run) for d in decisions) == 6
    assert decisions[6:] == [Drop("rate_limited")] * 14
    assert not ing.seen("m6")
    assert isinstance(ing.admit(msg("o1", channel="100", author="8"), 0.0), Run)
    assert isinstance(ing.admit(msg("m6", channel="106"), 10.0), Run)  # a token came back


def test_steered_buffered_waiting_owner_and_room_limits() -> None:
    """A steer starts no turn and never counts; the owner is not paced; a message that waits for a slot counts; a
    room's own bucket holds its turns whoever speaks."""
    ing = Ingress(Policy(guild_ids=frozenset({"1"}), owner_id="900", user_turns_per_minute=1, room_turns_per_minute=2,
                         max_turns=1))
    assert isinstance(ing.admit(msg("a"), 0.0), Run)
    assert all(isinstance(ing.admit(msg(f"s{i}"), 0.0, live_run=True, turns=0), Run) for i in range(5))
    assert ing.admit(msg("b", channel="12"), 0.0) == Drop("rate_limited")
    assert all(isinstance(ing.admit(msg(f"o{i}", author="900"), 0.0), Run) for i in range(3))
    assert ing.admit(msg("w", author="8"), 0.0, turns=1) == Waiting(unprompted=True)
    assert ing.admit(msg("x", author="9"), 0.0) == Drop("rate_limited")  # room 11: a and w spent its two


def test_a_spammer_is_slowed_with_one_hourglass_while_another_person_is_answered(env: dict[str, str]) -> None:
    """Through the real bridge: six turns a minute per person; the seventh and eighth are ``rate_limited`` with a
    single ⏳; another person in the same room is answered; messages steered into a live run never count."""
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
            steered = [str((await h.fake.message(CHAN, f"and {i}", author_id=PERSON))["id"]) for i in range(8)]
            await h.until(lambda: len(h.service.submits) == 9)
            release.set()
            await h.until(lambda: all(closing(h, m) for m in [held, *steered]))
            mine = []
            for i in range(7):
                m = str((await h.fake.message(CHAN2, f"spam {i}", author_id=PERSON))["id"])
                await h.until(lambda m=m: bool(closing(h, m)))  # type: ignore[misc]  # bound per loop pass
                mine.append(m)
            assert [closing(h, m) for m in mine] == [["settled"]] * 5 + [["dropped"]] * 2  # "hold" was the first of six
            assert {r["reason"] for r in h.receipts() if r["delivery_id"] in mine[5:]} == {"rate_limited"}
            other = str((await h.fake.message(CHAN2, "hello", author_id=OTHER))["id"])
            await h.until(lambda: closing(h, other) == ["settled"])
            await h.until(lambda: bool(h.fake.reactions.get(mine[5])))
            assert h.fake.reactions[mine[5]] == [HOURGLASS] and mine[6] not in h.fake.reactions
            owner = str((await h.fake.message(CHAN2, "the owner", author_id=OWNER))["id"])
            await h.until(lambda: closing(h, owner) == ["settled"])

    asyncio.run(main())
