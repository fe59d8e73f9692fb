"""Engagement for any number of rooms, bounded by age and count (fake clock), never by a silent cap."""

from __future__ import annotations

import asyncio

from bridge.admission import Buffered, Drop, Engagement, Ingress, Policy, Run
from bridge.app import BridgeApp
from bridge.engagement import Rooms
from bridge.inbound import Inbound
from clankie.protocol import TurnOutcome
from clankie.settings import load
from clankie.testing.clock import FakeClock

G = "1"


def msg(mid: str, channel: str, text: str = "chatter") -> Inbound:
    return Inbound(message_id=mid, channel_id=channel, guild_id=G, author_id="902", text=text)


def ingress(*, idle: float = 3600.0, rooms: int = 10_000, window: int = 3) -> Ingress:
    return Ingress(Policy(guild_ids=frozenset({G}), reply_policy="addressed", window=window,
                          engagement_idle_s=idle, engagement_max_rooms=rooms))


def answered(ing: Ingress, channel: str, now: float) -> None:
    assert isinstance(ing.admit(msg(f"{channel}-hi-{now}", channel, "clankie?"), now), Run)
    ing.settle(channel, TurnOutcome.SETTLED, now)


def test_within_the_bounds_every_room_stays_engaged_far_past_the_old_cap_of_64() -> None:
    ing = ingress()
    for n in range(1000):
        answered(ing, str(100 + n), float(n))
    assert ing.engaged_rooms == 1000 and ing.engagement_evicted == 0
    for n in range(1000):  # the first room answered is still read live, like the last
        assert ing.engagement(str(100 + n)) is Engagement.ENGAGED
        assert isinstance(ing.admit(msg(f"c{n}", str(100 + n)), 1000.0), Run)


def test_past_the_count_the_least_recently_active_room_is_forgotten_and_counted() -> None:
    ing = ingress(rooms=3)
    for n, channel in enumerate(("A", "B", "C")):
        answered(ing, channel, float(n))
    assert isinstance(ing.admit(msg("a2", "A"), 3.0), Run)  # A is active again: B is now the least recent
    answered(ing, "D", 4.0)
    assert ing.engaged_rooms == 3 and ing.engagement_evicted == 1
    assert [ing.engagement(c) for c in "ABCD"] == [Engagement.ENGAGED, Engagement.UNTRACKED,
                                                    Engagement.ENGAGED, Engagement.ENGAGED]
    assert ing.admit(msg("b2", "B"), 5.0) == Drop("not_addressed")  # forgotten: as if never answered there
    answered(ing, "B", 6.0)  # answering again brings it back (and forgets the next least recent, C)
    assert ing.engagement("B") is Engagement.ENGAGED and ing.engagement("C") is Engagement.UNTRACKED


def test_a_room_idle_for_the_setting_is_forgotten_and_one_just_under_it_is_not() -> None:
    clock = FakeClock()
    ing = ingress(idle=100.0)
    answered(ing, "A", clock.wall())
    answered(ing, "B", clock.wall())
    clock.advance(50)
    assert isinstance(ing.admit(msg("a2", "A"), clock.wall()), Run)  # A active at +50
    clock.advance(99)  # B idle 149 s, A idle 99 s
    assert isinstance(ing.admit(msg("a3", "A", "still here"), clock.wall()), Run)
    assert ing.engagement("A") is Engagement.ENGAGED and ing.engagement("B") is Engagement.UNTRACKED
    assert ing.engaged_rooms == 1 and ing.engagement_evicted == 1
    clock.advance(100)  # A idle exactly the setting
    assert ing.admit(msg("a4", "A"), clock.wall()) == Drop("not_addressed")
    assert ing.engaged_rooms == 0 and ing.engagement_evicted == 2


def test_a_room_with_buffered_messages_is_never_forgotten_before_its_catch_up_turn() -> None:
    ing = ingress(idle=100.0, rooms=1, window=1)
    answered(ing, "A", 0.0)
    assert isinstance(ing.admit(msg("a1", "A"), 1.0), Run)
    ing.settle("A", TurnOutcome.SILENT, 1.0)
    assert ing.admit(msg("a2", "A"), 2.0) == Buffered(1)
    answered(ing, "B", 500.0)  # past both bounds, but A holds a backlog: it stays
    assert ing.backlog("A") == 1 and ing.engaged_rooms == 2
    [taken] = ing.catch_up()
    assert taken.ids == ("a2",)
    answered(ing, "C", 501.0)  # with the backlog gone, A goes (idle) and B (the count)
    assert ing.engaged_rooms == 1 and ing.engagement("A") is Engagement.UNTRACKED


def test_rooms_at_scale_stay_within_the_count() -> None:
    rooms: Rooms[str] = Rooms(idle_s=10.0, max_rooms=100)
    for n in range(5000):
        rooms.touch(str(n), n * 0.001, create=True)
        assert len(rooms) <= 100
    assert rooms.evicted == 4900


def test_the_bridge_heartbeat_counts_engaged_and_evicted_rooms(env: dict[str, str]) -> None:
    settings = load({**env, "CLANKIE_DISCORD_REPLY_POLICY": "addressed", "CLANKIE_DISCORD_GUILD_IDS": G,
                     "CLANKIE_DISCORD_ENGAGEMENT_MAX_ROOMS": "2", "CLANKIE_DISCORD_ENGAGEMENT_IDLE_SECONDS": "60"})

    async def main() -> None:
        clock = FakeClock()
        app = BridgeApp(settings, clock=clock)
        for channel in ("A", "B", "C"):
            answered(app.ingress, channel, clock.wall())
        report = app.heartbeat().report
        assert (report["engaged_rooms"], report["engagement_evicted"]) == (2, 1)
        app.receipts.close()

    asyncio.run(main())
