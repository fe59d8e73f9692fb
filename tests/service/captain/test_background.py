"""Fire-and-forget sends (typing) are held by the captain and stopped with it."""

from __future__ import annotations

import asyncio
import gc

import pytest

from clankie import settings as settings_mod
from clankie.protocol import TypingSignal
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from service.app import ServiceApp
from service.captain.lanes import captain as captain_mod
from service.captain.tools.model_tools import DeliveryContext
from tests.polling import until
from tests.service.captain.harness import msg, run, service_env


class SlowConn:
    """A bridge connection whose typing notification never completes until cancelled."""

    def __init__(self) -> None:
        self.closed = False
        self.sent: list[TypingSignal] = []
        self.cancelled = asyncio.Event()

    async def notify(self, method: str, record: TypingSignal) -> None:
        self.sent.append(record)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


def test_typing_send_is_held_until_done_and_cancelled_on_close(env: dict[str, str]) -> None:
    """A typing signal still being sent is referenced by the captain (not lost to GC) and cancelled when it closes."""

    async def body() -> None:
        async with FakeAnthropic() as fake:
            gate = asyncio.Event()
            fake.script(fa.text("hello there", chunk_size=11, stall_after=3, stall_until=gate))  # one delta, then held
            app = ServiceApp(settings_mod.load(service_env(env, fake), discord_context_messages=0))
            captain = app.captain
            conn = SlowConn()
            first = msg("m1", "hello?")
            turn = asyncio.create_task(captain.submit(first, DeliveryContext("m1", first.room, conn)))  # type: ignore[arg-type]  # a stand-in connection that records notifications
            await until(lambda: conn.sent != [])  # "hello there" can no longer become the silence sentinel
            gc.collect()
            assert [s.delivery_id for s in conn.sent] == ["m1"]
            assert len(captain.background) == 1
            await captain.aclose()
            assert conn.cancelled.is_set() and not captain.background
            gate.set()
            assert ((await turn).outcome, (await turn).code) == ("failed", "shutting_down")  # left for the restart
            await app.close()

    run(body())


def test_at_the_bound_a_typing_send_is_skipped_and_the_turn_still_answers(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With BACKGROUND_MAX sends in flight, another lane's typing is not sent (it only decorates a turn); its reply is."""
    monkeypatch.setattr(captain_mod, "BACKGROUND_MAX", 1)

    async def body() -> None:
        async with FakeAnthropic() as fake:
            gate = asyncio.Event()
            fake.script(fa.text("hello there", chunk_size=11, stall_after=3, stall_until=gate))
            app = ServiceApp(settings_mod.load(service_env(env, fake), discord_context_messages=0))
            captain = app.captain
            conn = SlowConn()
            first = msg("m1", "hello?")
            held = asyncio.create_task(captain.submit(first, DeliveryContext("m1", first.room, conn)))  # type: ignore[arg-type]  # a stand-in connection that records notifications
            await until(lambda: conn.sent != [], what="the first lane's typing send")
            assert len(captain.background) == 1 and captain.background.full
            fake.script(fa.text("and hello to you"))
            second = msg("m2", "anyone?", channel="3")
            result = await captain.submit(second, DeliveryContext("m2", second.room, conn))  # type: ignore[arg-type]  # as above
            assert (result.outcome, result.text) == ("settled", "and hello to you")
            assert [s.delivery_id for s in conn.sent] == ["m1"]  # the second lane's typing was skipped
            await captain.aclose()
            gate.set()
            await held
            await app.close()

    run(body())
