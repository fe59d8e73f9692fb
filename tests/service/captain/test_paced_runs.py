"""A run whose model call waits in the provider governor is paced, not stalled, and the heartbeat says so."""

from __future__ import annotations

import asyncio

from clankie.testing import fake_anthropic as fa
from clankie.testing.clock import FakeClock
from clankie.testing.fake_anthropic import FakeAnthropic
from tests.polling import until
from tests.service.captain.harness import FakeBridge, msg, run, service


def test_a_run_waiting_for_a_model_slot_reports_no_silence_to_the_watchdog(env: dict[str, str]) -> None:
    """One call in flight at most: a second room's run waits ten minutes for the slot with age 0, shown in status."""

    async def body() -> None:
        clock = FakeClock()
        hold = asyncio.Event()
        async with FakeAnthropic() as fake:
            fake.script(fa.text("first room", stall_after=1, stall_until=hold), fa.text("second room"))
            async with service(env, fake, clock=clock, model_max_concurrent=1) as app:
                bridge = FakeBridge(history=[])
                await bridge.connect(app)
                first = bridge.start(msg("a1", "hello", channel="10"))
                await fake.wait_for_requests(1)
                second = bridge.start(msg("b1", "hello", channel="20"))
                await until(lambda: app.governor.status().waiting == 1)
                clock.advance(600.0)  # twice the stall limit, on the clock the ages are measured with
                beat = app.heartbeat()
                ages = {r.lane.rsplit(":", 1)[-1]: (r.last_event_age_s, r.paced) for r in beat.runs}
                assert ages["20"] == (0.0, True)  # waiting for the provider: never a stalled run
                assert ages["10"] == (600.0, False)  # the held call itself is silent, and that counts
                assert "model calls: 1 waiting for the rate limit" in beat.detail
                assert beat.report["model_calls_waiting"] == 1 and beat.report["model_calls_in_flight"] == 1
                hold.set()
                assert (await first).outcome == "settled" and (await second).outcome == "settled"
                assert app.governor.status().waiting == 0

    run(body())
