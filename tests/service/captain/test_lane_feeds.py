"""The captain feeds a lane's machine without looking at its state: the machine decides, late news included."""

from __future__ import annotations

import asyncio

from clankie import settings as settings_mod
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from service.app import ServiceApp
from service.captain.tools import DeliveryContext
from tests.polling import until
from tests.service.captain.harness import msg, run, service_env

ROOM_KEY = "discord:clankie:discord:1:2"


def test_an_operator_abort_aborts_only_the_live_run_it_names(env: dict[str, str]) -> None:
    """An idle lane has nothing to abort and a stale run id names nothing: both answer False and change nothing;
    the live run's id aborts it, its turn fails with the run's end, and the lane stays (warm) for the room."""

    async def body() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.text("hello"), fa.text("never finishes", stall_after=2))
            app = ServiceApp(settings_mod.load(service_env(env, fake)))
            first = msg("m1", "hi")
            assert (await app.captain.submit(first, DeliveryContext("m1", first.room, None))).text == "hello"
            assert app.captain.abort(ROOM_KEY, None, "operator") is False  # idle: the machine answers no AbortAgent
            second = msg("m2", "go on")
            t2 = asyncio.create_task(app.captain.submit(second, DeliveryContext("m2", second.room, None)))
            await fake.wait_for_requests(2)
            lane = app.captain.lanes[ROOM_KEY]
            await until(lambda: lane.agent.is_running)
            assert app.captain.abort(ROOM_KEY, "not-this-run", "operator") is False
            assert lane.agent.is_running and not t2.done()
            assert app.captain.abort(ROOM_KEY, lane.run_id, "operator") is True
            assert (await t2).code == "captain_session_failed"
            assert app.captain.lanes[ROOM_KEY] is lane and lane.machine.at_rest
            await app.close()

    run(body())


def test_shutdown_mid_run_forgets_the_lane_and_answers_its_turn_shutting_down(env: dict[str, str]) -> None:
    """Shutdown is an event fed to every lane: a live lane is dropped at once and its turn settles when the cut run
    ends, with ``shutting_down`` (left for the restarted service); an idle lane is simply dropped."""

    async def body() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.text("hello"), fa.text("never finishes", stall_after=2))
            app = ServiceApp(settings_mod.load(service_env(env, fake)))
            idle = msg("m1", "hi", channel="3")
            assert (await app.captain.submit(idle, DeliveryContext("m1", idle.room, None))).text == "hello"
            busy = msg("m2", "go on")
            t2 = asyncio.create_task(app.captain.submit(busy, DeliveryContext("m2", busy.room, None)))
            await fake.wait_for_requests(2)
            await until(lambda: app.captain.lanes[ROOM_KEY].agent.is_running)
            await app.captain.aclose()
            assert (await t2).code == "shutting_down"
            assert not app.captain.lanes and app.captain.runs() == ()
            await app.close()

    run(body())
