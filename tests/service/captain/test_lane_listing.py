"""`lanes` lists every lane: the live ones first, then the lanes only on disk, newest first, at most lanes_list_max."""

from __future__ import annotations

import os

from clankie.journald import lane_hash
from clankie.protocol import LanesReply, LanesRequest
from clankie.testing.fake_anthropic import FakeAnthropic
from service.app import ServiceApp
from tests.service.captain.harness import FakeBridge, msg, run, service
from tests.service.captain.test_lane_registry import key, turn


def _age(app: ServiceApp, channel: str, seconds_ago: float) -> None:
    """Make the lane's session files look last written ``seconds_ago`` (so the order needs no waiting)."""
    when = app.clock.wall() - seconds_ago
    for path in app.captain.paths.room(key(channel)).glob("*.jsonl"):
        os.utime(path, (when, when))


async def _lanes(app: ServiceApp) -> LanesReply:
    reply = await app.link_handler(None, "lanes", LanesRequest())  # type: ignore[arg-type]  # the supervisor's link is not needed
    assert isinstance(reply, LanesReply)
    return reply


def test_evicted_lanes_are_listed_after_the_live_ones_with_warmth_and_age(env: dict[str, str]) -> None:
    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, lanes_max_live=2) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            for n, channel in enumerate(("10", "11", "12", "13")):
                assert (await turn(app, bridge, msg(f"m{n}", "hello", channel=channel))).outcome == "settled"
            _age(app, "10", 3600)
            _age(app, "11", 60)
            reply = await _lanes(app)
            assert [(i.key, i.live, i.state) for i in reply.lanes] == [
                (key("13"), True, "idle"), (key("12"), True, "idle"),
                (key("11"), False, "on_disk"), (key("10"), False, "on_disk"),
            ]
            disk = reply.lanes[2:]
            assert all(i.warm for i in disk)  # evicted warm by this process: they come back warm
            assert disk[0].last_active_age_s is not None and disk[0].last_active_age_s >= 60
            assert disk[1].last_active_age_s is not None and disk[1].last_active_age_s >= 3600
            assert disk[0].tokens is None  # a disk lane's spend is not read: the listing stays cheap

    run(body())


def test_the_listing_stops_at_lanes_list_max_keeping_the_most_recent(env: dict[str, str]) -> None:
    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, lanes_max_live=2, lanes_list_max=3) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            for n, channel in enumerate(("10", "11", "12", "13")):
                await turn(app, bridge, msg(f"m{n}", "hello", channel=channel))
            _age(app, "10", 60)
            _age(app, "11", 3600)
            keys = [i.key for i in (await _lanes(app)).lanes]
            assert keys == [key("13"), key("12"), key("10")]  # 11 is the oldest on disk: past the bound

    run(body())


def test_after_a_restart_every_lane_is_listed_cold_from_disk(env: dict[str, str]) -> None:
    async def body() -> None:
        async with FakeAnthropic() as fake:
            async with service(env, fake, lanes_max_live=1) as app:
                bridge = FakeBridge()
                await bridge.connect(app)
                await turn(app, bridge, msg("a", "hello", channel="10"))
                await turn(app, bridge, msg("b", "hello", channel="11"))
            async with service(env, fake, lanes_max_live=1) as app:
                reply = await _lanes(app)
                assert sorted(i.key for i in reply.lanes) == [key("10"), key("11")]
                assert all(not i.live and not i.warm and i.state == "on_disk" for i in reply.lanes)

    run(body())


def test_a_lane_is_found_by_its_hash_live_or_on_disk_even_past_the_listing_bound(env: dict[str, str]) -> None:
    """``lanes`` with a hash (or a prefix) returns just that lane, from every lane: one past lanes_list_max too."""
    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, lanes_max_live=1, lanes_list_max=2) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            for n, channel in enumerate(("10", "11", "12", "13")):
                await turn(app, bridge, msg(f"m{n}", "hello", channel=channel))
            _age(app, "10", 7200)  # the oldest on disk: not in the bounded listing
            assert key("10") not in [i.key for i in (await _lanes(app)).lanes]
            for channel, live in (("10", False), ("13", True)):
                wanted = lane_hash(key(channel))
                for asked in (wanted, wanted[:5]):
                    reply = await app.link_handler(None, "lanes", LanesRequest(hash=asked))  # type: ignore[arg-type]  # no link needed
                    assert isinstance(reply, LanesReply)
                    found = [i for i in reply.lanes if lane_hash(i.key).startswith(asked)]
                    assert found == list(reply.lanes) and [(i.key, i.live) for i in found][:1] == [(key(channel), live)]

    run(body())
