"""Fire-and-forget sends (typing) are held by the captain and stopped with it."""

from __future__ import annotations

import asyncio
import gc
from types import SimpleNamespace

from clankie import settings as settings_mod
from clankie.protocol import Room, TypingSignal
from clankie.testing.clock import FakeClock
from service.captain.captain import Captain, CaptainDeps
from service.captain.tools import DeliveryContext, TurnCapture
from tests.service.captain.harness import run


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
        captain = Captain(CaptainDeps(settings=settings_mod.load(env), clock=FakeClock(), provider=None))
        conn = SlowConn()
        room = Room(guild_id="1", channel_id="2")
        capture = TurnCapture(room=room, owner=DeliveryContext("m1", room, conn))  # type: ignore[arg-type]  # a stand-in connection that records notifications
        lane = SimpleNamespace(typing_sent=False, text_so_far="", capture=capture)
        captain._watch_typing(lane, "hello there")  # type: ignore[arg-type]  # a stand-in lane with only what _watch_typing reads
        await asyncio.sleep(0)
        gc.collect()
        assert [s.delivery_id for s in conn.sent] == ["m1"]
        assert len(captain.background) == 1
        await captain.aclose()
        assert conn.cancelled.is_set() and not captain.background

    run(body())
