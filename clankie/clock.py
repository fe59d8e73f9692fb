"""Injected time: the :class:`Clock` every shell takes, and the system's.

A pure core takes ``now`` as an argument; an async shell takes a :class:`Clock`.
Durations use ``monotonic``; ages that must count time spent suspended (the
stall watchdog, heartbeat ages) use ``boottime`` (``CLOCK_BOOTTIME``), which
keeps running while the host sleeps. ``wall`` is for timestamps only.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """What a shell needs from time."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back and stops during suspend."""

    def boottime(self) -> float:
        """Seconds on a clock that never goes back and counts suspended time."""

    def wall(self) -> float:
        """Seconds since the epoch, for timestamps shown to people."""

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""


class SystemClock:
    """The real clocks of this machine."""

    def monotonic(self) -> float:
        return time.monotonic()

    def boottime(self) -> float:
        return time.clock_gettime(time.CLOCK_BOOTTIME)

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))
