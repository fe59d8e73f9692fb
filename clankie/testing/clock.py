"""A fake clock for tests: time moves only when the test says so."""

from __future__ import annotations

import asyncio
import heapq
import itertools


class FakeClock:
    """A :class:`clankie.clock.Clock` whose time is advanced by hand.

    ``monotonic``, ``boottime`` and ``wall`` move together, except that
    :meth:`suspend` moves ``boottime`` and ``wall`` only, as a host that
    slept would. Sleepers wake when :meth:`advance` passes their deadline.
    With ``autojump=True`` a sleep advances the clock itself at once, which
    lets retry and backoff schedules run at full speed.
    """

    def __init__(self, start: float = 1000.0, *, autojump: bool = False) -> None:
        self._mono = start
        self._boot = start
        self._wall = 1_800_000_000.0 + start
        self._autojump = autojump
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self._mono

    def boottime(self) -> float:
        return self._boot

    def wall(self) -> float:
        return self._wall

    async def sleep(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.slept.append(seconds)
        if self._autojump:
            self.advance(seconds)
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._mono + seconds, next(self._seq), fut))
        await fut

    def advance(self, seconds: float) -> None:
        """Move every clock forward and wake the sleepers that are due."""
        self._mono += seconds
        self._boot += seconds
        self._wall += seconds
        self._wake()

    def suspend(self, seconds: float) -> None:
        """Pretend the host slept: boottime and wall move, monotonic does not."""
        self._boot += seconds
        self._wall += seconds

    @property
    def sleepers(self) -> int:
        """How many sleeps are waiting (cancelled ones excluded)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    def _wake(self) -> None:
        while self._sleepers and self._sleepers[0][0] <= self._mono:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)
