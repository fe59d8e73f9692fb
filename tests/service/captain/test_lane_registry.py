"""Live lanes are bounded (LRU over idle lanes); an evicted lane comes back as if never evicted; one run id per run."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from clankie import settings as settings_mod
from clankie.errors import ConfigError
from clankie.protocol import LanesReply, LanesRequest, TurnResult, TurnSubmit
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from service.app import ServiceApp
from service.captain.tools.model_tools import DeliveryContext
from tests.fds import open_under
from tests.polling import until
from tests.service.captain.harness import FakeBridge, msg, run, service, user_texts
from tests.syncs import drain_syncs


def key(channel: str) -> str:
    return f"discord:clankie:discord:1:{channel}"


async def quiet(app: ServiceApp) -> None:
    """Until every live lane's owner task has ended (a turn answers just before its run task returns)."""
    await until(lambda: all(lane.owner_task is None or lane.owner_task.done() for lane in app.captain.lanes.values()))


async def turn(app: ServiceApp, bridge: FakeBridge, submit: TurnSubmit) -> TurnResult:
    """One turn through the bridge, returned once its lane is idle again (so it may be evicted)."""
    result = await bridge.submit(submit)
    await quiet(app)
    return result


def open_fds(state: Path) -> list[str]:
    """The files under the state directory this process holds open, once the background syncs are done (each holds a
    dup of the file it syncs)."""
    drain_syncs()
    return open_under(state)


def test_lanes_reply_names_the_run_id_the_agent_logs(env: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    """The run id `clankiectl lanes` shows is the one the agent's log lines of that run carry."""
    caplog.set_level(logging.INFO)

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            gate = asyncio.Event()
            fake.script(fa.text("thinking", stall_after=2, stall_until=gate))
            bridge = FakeBridge()
            await bridge.connect(app)
            t1 = bridge.start(msg("m1", "hello"))
            await fake.wait_for_requests(1)
            reply = await app.link_handler(None, "lanes", LanesRequest())  # type: ignore[arg-type]  # the link handler does not use the connection for lanes
            assert isinstance(reply, LanesReply)
            (info,) = reply.lanes
            assert info.run_id is not None and info.run_id == app.captain.lanes[key("2")].agent.run_id
            gate.set()
            assert (await t1).outcome == "settled"
            run_id = info.run_id

        agent_lines = [r.getMessage() for r in caplog.records if r.name == "service.agent.agent"]
        assert f"run {run_id} settled: ok after 1 turns" in agent_lines
        assert all(run_id in line for line in agent_lines if line.startswith("run "))

    run(body())


def test_bound_is_respected_across_many_rooms_and_reported(env: dict[str, str]) -> None:
    """Twenty rooms through a bound of three: never more than three live, seventeen evicted, all in the heartbeat."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, lanes_max_live=3) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            for n in range(20):
                result = await turn(app, bridge, msg(f"m{n}", f"room {n} speaks", channel=str(100 + n)))
                assert result.outcome == "settled"
                assert len(app.captain.lanes) <= 3
            assert list(app.captain.lanes) == [key("117"), key("118"), key("119")]  # the most recently used
            report = app.heartbeat().report
            assert (report["lanes_live"], report["lanes_max_live"], report["lanes_evicted"]) == (3, 3, 17)
            assert "3 lanes (17 evicted)" in app.heartbeat().detail

    run(body())


def test_evicted_warm_lane_comes_back_warm_with_its_context(env: dict[str, str]) -> None:
    """A warm lane evicted in this process reads no history when it returns, and its session tree is reloaded."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, lanes_max_live=1) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            assert (await turn(app, bridge, msg("a1", "remember the walrus", channel="10"))).outcome == "settled"
            assert len(bridge.history_calls) == 1  # cold: read the room once
            assert not app.captain.lanes[key("10")].fresh
            assert (await turn(app, bridge, msg("b1", "other room", channel="11"))).outcome == "settled"
            assert key("10") not in app.captain.lanes and app.captain.registry.evicted == 1
            assert len(bridge.history_calls) == 2
            assert (await turn(app, bridge, msg("a2", "what did I say", channel="10"))).outcome == "settled"
            lane = app.captain.lanes[key("10")]
            assert not lane.fresh and lane.history_requests == 0  # warm: no history read
            assert len(bridge.history_calls) == 2
            texts = user_texts(fake.requests[-1])
            assert any("remember the walrus" in t for t in texts) and any("what did I say" in t for t in texts)
            assert app.captain.lane_infos()[0].warm

    run(body())


def test_lane_evicted_warm_before_a_restart_comes_back_cold(env: dict[str, str]) -> None:
    """A warm stamp left by the previous service process does not count: after a restart the lane is cold."""

    async def body() -> None:
        async with FakeAnthropic() as fake:
            async with service(env, fake, lanes_max_live=1) as app:
                bridge = FakeBridge()
                await bridge.connect(app)
                await turn(app, bridge, msg("a1", "before the restart", channel="10"))
                await turn(app, bridge, msg("b1", "other room", channel="11"))
                assert key("10") not in app.captain.lanes and app.captain.registry.evicted == 1
            async with service(env, fake, lanes_max_live=1) as app:
                bridge = FakeBridge()
                await bridge.connect(app)
                assert (await turn(app, bridge, msg("a2", "after the restart", channel="10"))).outcome == "settled"
                assert app.captain.lanes[key("10")].history_requests == 1 and len(bridge.history_calls) == 1

    run(body())


def test_evicted_cold_lane_comes_back_cold(env: dict[str, str]) -> None:
    """A lane still cold (its history could not be read) is cold again after eviction: it reads the room next time."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, lanes_max_live=1) as app:
            first = msg("a1", "no bridge here", channel="10")
            result = await app.captain.submit(first, DeliveryContext("a1", first.room, None))
            await quiet(app)
            assert result.outcome == "settled" and app.captain.lanes[key("10")].fresh
            bridge = FakeBridge()
            await bridge.connect(app)
            await turn(app, bridge, msg("b1", "other room", channel="11"))
            assert key("10") not in app.captain.lanes
            calls = len(bridge.history_calls)
            assert (await turn(app, bridge, msg("a2", "now with a bridge", channel="10"))).outcome == "settled"
            assert len(bridge.history_calls) == calls + 1 and app.captain.lanes[key("10")].history_requests == 1

    run(body())


def test_message_steered_into_a_reloaded_lane_is_absorbed(env: dict[str, str]) -> None:
    """After eviction and reload, a burst in the room still gets one answer with the second turn absorbed."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, lanes_max_live=1) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            await turn(app, bridge, msg("a1", "first visit", channel="10"))
            await turn(app, bridge, msg("b1", "other room", channel="11"))
            assert key("10") not in app.captain.lanes
            gate = asyncio.Event()
            fake.script(fa.text("hm", stall_after=2, stall_until=gate), fa.text("one answer for both"))
            t1 = bridge.start(msg("a2", "back again", channel="10"))
            await until(lambda: key("10") in app.captain.lanes and app.captain.lanes[key("10")].agent.is_running)
            t2 = bridge.start(msg("a3", "and another thing", channel="10"))
            await until(lambda: app.captain.lanes[key("10")].machine.steerers != [])
            gate.set()
            r1, r2 = await asyncio.gather(t1, t2)
            assert (r1.outcome, r1.text) == ("settled", "one answer for both")
            assert (r2.outcome, r2.turn_id) == ("absorbed", "turn-2-a3")
            assert any("and another thing" in t for t in user_texts(fake.requests[-1]))

    run(body())


def test_busy_lanes_exceed_the_bound_and_no_message_fails(env: dict[str, str]) -> None:
    """With every live lane running, a new room still opens (over the bound); the next idle one is evicted later."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, lanes_max_live=1) as app:
            gate = asyncio.Event()
            fake.script(fa.text("slow", stall_after=2, stall_until=gate), fa.text("slow too", stall_after=2, stall_until=gate))
            bridge = FakeBridge()
            await bridge.connect(app)
            t1 = bridge.start(msg("a1", "busy one", channel="10"))
            t2 = bridge.start(msg("b1", "busy two", channel="11"))
            await fake.wait_for_requests(2)
            assert set(app.captain.lanes) == {key("10"), key("11")} and app.captain.registry.evicted == 0
            gate.set()
            assert [r.outcome for r in await asyncio.gather(t1, t2)] == ["settled", "settled"]
            await quiet(app)
            assert (await turn(app, bridge, msg("c1", "third room", channel="12"))).outcome == "settled"
            assert list(app.captain.lanes) == [key("12")] and app.captain.registry.evicted == 2

    run(body())


def test_open_fds_do_not_grow_with_rooms_past_the_bound(env: dict[str, str]) -> None:
    """Past the bound, thirty more rooms leave the service's open file count where it was (session files are closed)."""

    state = Path(env["CLANKIE_STATE"])

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, lanes_max_live=4) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            for n in range(8):
                await turn(app, bridge, msg(f"w{n}", "warm up", channel=str(200 + n)))
            before = open_fds(state)
            for n in range(30):
                await turn(app, bridge, msg(f"m{n}", "one more room", channel=str(300 + n)))
            assert sorted(set(open_fds(state)) - set(before)) == []  # thirty open session files would show here
            assert len(app.captain.lanes) == 4

    run(body())


@pytest.mark.parametrize("value", ["0", "-1", "lots"])
def test_a_bad_lane_bound_is_a_config_error(env: dict[str, str], value: str) -> None:
    """CLANKIE_LANES_MAX_LIVE below 1 (or not a number) is refused with one line naming it."""
    with pytest.raises(ConfigError) as caught:
        settings_mod.load({**env, "CLANKIE_LANES_MAX_LIVE": value})
    assert "lanes_max_live" in str(caught.value).lower() and "\n" not in str(caught.value)
