"""A graceful restart costs no answer: turns cut by it run again on the restarted service, charged for nothing.

Also what a crash would be charged to: the records name a run only for the turns that were part of it.
"""

from __future__ import annotations

import asyncio

import pytest

from bridge.service_link import RETRYABLE_REMOTE
from clankie import jsonl
from clankie import settings as settings_mod
from clankie.errors import RemoteError
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from service.app import ServiceApp
from tests.polling import until
from tests.service.captain.harness import FakeBridge, msg, run, service, service_env


def test_graceful_restart_mid_turn_runs_the_turn_again(env: dict[str, str]) -> None:
    """A turn in flight at a graceful stop is answered shutting_down, not failed, and its re-submission settles once."""

    async def body() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.text("never finishes", stall_after=2), fa.text("answered after the restart"))
            app = ServiceApp(settings_mod.load(service_env(env, fake)))
            await app.start()
            bridge = FakeBridge()
            await bridge.connect(app)
            turn = bridge.start(msg("m1", "hello"))
            await fake.wait_for_requests(1)
            await app.close()
            with pytest.raises(RemoteError) as err:
                await turn
            assert err.value.code == "shutting_down" and err.value.code in RETRYABLE_REMOTE  # the bridge retries it
            retained = app.store.load("m1")
            assert retained is not None and retained.result is None  # nothing retained: still to be answered
            assert app.turns.evidence.of("m1") == ["accepted"]

            async with service(env, fake) as again:
                bridge = FakeBridge()
                await bridge.connect(again)
                result = await bridge.submit(msg("m1", "hello"))
                assert (result.outcome, result.text) == ("settled", "answered after the restart")
                assert await bridge.submit(msg("m1", "hello")) == result  # now retained: one outcome
                assert again.turns.evidence.of("m1") == ["accepted", "accepted", "settled"]
            assert len(fake.requests) == 2

    run(body())


def test_submission_during_shutdown_is_refused_retryably(env: dict[str, str]) -> None:
    """A turn submitted while the service is stopping is refused shutting_down and nothing about it is recorded."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            app.turns.begin_shutdown()
            with pytest.raises(RemoteError) as err:
                await bridge.submit(msg("m1", "hello"))
            assert err.value.code == "shutting_down"
            assert app.store.load("m1") is None and app.turns.evidence.of("m1") == []
            assert fake.requests == []

    run(body())


ROOM = "discord:clankie:discord:1:2"


def test_only_the_owner_and_turns_handed_to_the_agent_are_recorded_as_part_of_the_run(env: dict[str, str]) -> None:
    """The owner names its run on disk at once; a turn held while the lane reads history names it only when flushed in."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            gate = asyncio.Event()
            fake.script(fa.text("hm", stall_after=3, stall_until=gate), fa.text("one answer"))
            bridge = FakeBridge()
            bridge.history_gate = asyncio.Event()  # the cold lane waits for history: the run is accepted, not streaming
            await bridge.connect(app)
            t1 = bridge.start(msg("m1", "first"))
            await until(lambda: bridge.history_calls)
            t2 = bridge.start(msg("m2", "second"))
            await until(lambda: app.captain.lanes[ROOM].machine.held != [])
            run_id = app.captain.lanes[ROOM].machine.run_id
            assert run_id is not None
            assert [app.store.load(d).run for d in ("m1", "m2")] == [run_id, None]  # type: ignore[union-attr]  # the records exist: the submits above wrote them
            bridge.history_gate.set()
            await fake.wait_for_requests(1)
            assert app.store.load("m2").run == run_id  # type: ignore[union-attr]  # flushed: now part of the run
            t3 = bridge.start(msg("m3", "third"))
            await until(lambda: app.store.load("m3") is not None and app.store.load("m3").run == run_id)  # type: ignore[union-attr]  # guarded by the is-not-None check on the left
            gate.set()
            assert [r.outcome for r in await asyncio.gather(t1, t2, t3)] == ["settled", "absorbed", "absorbed"]
            for d in ("m1", "m2", "m3"):
                rec = app.store.load(d)
                assert rec is not None and rec.run is None and rec.crashed_runs == () and rec.result is not None

    run(body())


def test_graceful_stops_charge_nobody_however_many(env: dict[str, str]) -> None:
    """With CLANKIE_POISON_RUNS=1, two graceful stops mid-run still leave the owner and a steered turn to be answered."""

    async def body() -> None:
        async with FakeAnthropic() as fake:
            senv = {**service_env(env, fake), "CLANKIE_POISON_RUNS": "1"}
            for _ in range(2):
                fake.script(fa.text("cut short", stall_after=2))
                app = ServiceApp(settings_mod.load(senv))
                await app.start()
                bridge = FakeBridge()
                await bridge.connect(app)
                cut = [bridge.start(msg("m1", "first"))]
                await fake.wait_for_requests(len(fake.requests) + 1)
                cut.append(bridge.start(msg("m2", "second")))
                await until(lambda a=app: a.captain.lanes[ROOM].machine.steerers != [])  # type: ignore[misc]  # the default argument binds this loop's app to the lambda
                await app.close()
                for turn in cut:
                    with pytest.raises(RemoteError):
                        await turn
                assert [app.store.load(d).run for d in ("m1", "m2")] == [None, None]  # type: ignore[union-attr]  # the records exist: the submits above wrote them
            fake.script(fa.text("answered at last"))
            async with service(env, fake, poison_runs=1) as again:
                bridge = FakeBridge()
                await bridge.connect(again)
                before = len(fake.requests)
                # m2 arrives while the cold lane reads history, so it is held and flushed into m1's run
                first, second = await asyncio.gather(bridge.submit(msg("m1", "first")), bridge.submit(msg("m2", "second")))
                assert (first.outcome, first.text, second.outcome) == ("settled", "answered at last", "absorbed")
                assert len(fake.requests) == before + 1
                evidence = jsonl.read_lines(again.captain.paths.evidence)
                assert not any("crashed_runs" in e or "cause" in e for e in evidence)

    run(body())
