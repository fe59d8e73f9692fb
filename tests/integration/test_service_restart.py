"""A graceful restart costs no answer: turns cut by it run again on the restarted service."""

from __future__ import annotations

import pytest

from bridge.service_link import RETRYABLE_REMOTE
from clankie import settings as settings_mod
from clankie.errors import RemoteError
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from service.app import ServiceApp
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
