"""The provider governor: every model call of the service passes through one.

It bounds the calls in flight (``CLANKIE_MODEL_MAX_CONCURRENT``) and starts
each only when :class:`~service.agent.pacing.Pacing` says the account's
buckets have room for it, so a crowd of lanes is paced to the account's rate
limits instead of discovering them one 429 at a time. Callers wait in order
of arrival: a call holds its slot while it waits for the pace, so at most the
ceiling minus one calls run while the queue is held.

A 429 any call gets pauses every call that has not started; the call that got
it goes back through the governor (:class:`~service.agent.attempts.Attempts`).

With ``slow_start`` a governor that knows nothing yet lets one call go (or
the window an earlier life learned, ``window``) and the rest wait until
answers widen it (:class:`~service.agent.pacing.Pacing`, "Slow start");
``remember`` hears each new learned window (:mod:`service.agent.learned`
keeps it across restarts).

A call that waits tells its run (``on_wait(True)`` then ``on_wait(False)``):
the run is paced, not stalled, and the stall watchdog does not count that
silence (:mod:`service.captain.lanes.reports`). :meth:`Governor.status` is what the
service's heartbeat shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

from clankie.clock import Clock
from clankie.waits import set_within
from service.agent.pacing import Pacing, Report

log = logging.getLogger(__name__)

SLOW_START_PATIENCE = 2.0
"""Seconds slow start waits for a call's stream to open before it lets one more go (an account holding answers)."""


@dataclass(frozen=True, slots=True)
class GovernorStatus:
    in_flight: int
    waiting: int
    paused_s: float
    throttled: int  # 429s seen since start
    remaining: dict[str, int]


class Ticket:
    """One call through the governor: report what its answer said."""

    def __init__(self, governor: Governor, seq: int) -> None:
        self._governor = governor
        self.seq = seq
        self._taken = False  # the account took this call (its stream opened or it answered): slow start widened once
        self._opened = False  # its headers were learned when its stream opened

    def opened(self, reported: Mapping[str, Report] | None) -> None:
        """The call's stream opened (the account took it), with its rate-limit headers (parsed)."""
        self._governor.learn(self.seq, reported, None, None)
        self._opened = True
        self._took()

    def answered(self, reported: Mapping[str, Report] | None, input_tokens: int | None = None,
                 output_tokens: int | None = None) -> None:
        """The answer's rate-limit headers (parsed) and, for a complete answer, what it cost.

        Headers already learned when the stream opened are not learned again: they describe the buckets then,
        and read as of now they would make a bucket look fuller and faster to refill than it is."""
        self._governor.learn(self.seq, None if self._opened else reported, input_tokens, output_tokens)
        if input_tokens is not None:
            self._took()

    def _took(self) -> None:
        if not self._taken:
            self._taken = True
            self._governor.took()

    def throttled(self, retry_after: float | None) -> float:
        """The answer was a 429: pause every call; returns the pause in seconds."""
        return self._governor.throttle(retry_after)


class Governor:
    """One per service process; see the module docstring."""

    def __init__(self, clock: Clock, *, max_concurrent: int, slow_start: bool = False, window: int | None = None,
                 remember: Callable[[int], None] | None = None, patience: float | None = None) -> None:
        self.clock = clock
        self._clock = clock
        self._slots = asyncio.Semaphore(max_concurrent)
        self._gate = asyncio.Lock()
        self._room = asyncio.Event()  # set when a call ends or the window widens: a call waiting for room looks again
        self.pacing = Pacing(window=(window or 1) if slow_start else None, max_window=max_concurrent)
        self._remember = remember
        self._remembered = self.pacing.learned()
        self._patience = patience  # slow start: a call held this long without its stream opening widens the window by one
        self._starts: dict[int, float] = {}  # calls in flight by seq: when each started
        self._widened_at = 0.0
        self.in_flight = 0
        self.waiting = 0

    @contextlib.asynccontextmanager
    async def call(self, on_wait: Callable[[bool], None]) -> AsyncIterator[Ticket]:
        """Wait for a slot and for the pace, then hold the slot for the call made inside."""
        told = False

        def tell() -> None:  # this call waits: its run hears it once
            nonlocal told
            if not told:
                told = True
                on_wait(True)

        self.waiting += 1
        try:
            if self._slots.locked():
                tell()
            await self._slots.acquire()
            try:
                if self._gate.locked():  # another call is waiting for the pace: so is this one
                    tell()
                async with self._gate:
                    while True:
                        if (delay := self.pacing.delay(self._clock.monotonic())) > 0:
                            tell()
                            await self._clock.sleep(delay)
                        elif not self.pacing.room(self.in_flight):  # slow start: wait for an answer to widen it
                            tell()
                            left = self._patience_left()
                            if left is not None and left <= 0:  # the account holds its answers: one more goes
                                self._widened_at = self._clock.monotonic()
                                self.pacing.answered()
                                continue
                            self._room.clear()
                            await self._until_room(left)
                        else:
                            break
                    seq = self.pacing.start()
                    self._starts[seq] = self._clock.monotonic()
            except BaseException:  # cancelled while waiting for the pace (an abort)
                self._slots.release()
                raise
        finally:
            self.waiting -= 1
            if told:
                on_wait(False)
        self.in_flight += 1
        try:
            yield Ticket(self, seq)
        finally:
            self.in_flight -= 1
            self._starts.pop(seq, None)
            self.pacing.reported(seq)  # a call cancelled before its answer says nothing more
            self._room.set()
            self._slots.release()

    def learn(self, seq: int, reported: Mapping[str, Report] | None, input_tokens: int | None,
              output_tokens: int | None) -> None:
        if reported:
            self.pacing.learn(seq, reported, self._clock.monotonic(), self._clock.wall())
        else:
            self.pacing.reported(seq)
        if input_tokens is not None and output_tokens is not None:
            self.pacing.spent(input_tokens, output_tokens)

    def _patience_left(self) -> float | None:
        """Seconds until slow start's patience with the oldest call in flight runs out (None: no patience)."""
        if self._patience is None or not self._starts:
            return None
        return max(min(self._starts.values()), self._widened_at) + self._patience - self._clock.monotonic()

    async def _until_room(self, left: float | None) -> None:
        """Wait until a call ends or the window widens, or ``left`` seconds of the clock."""
        if left is None:
            await self._room.wait()
            return
        await set_within(self._room, self._clock, left)

    def took(self) -> None:
        """A call got through (slow start widens its window by one) and the calls waiting for room look again."""
        self.pacing.answered()
        self._room.set()
        self._learned()

    def _learned(self) -> None:
        window = self.pacing.learned()
        if window != self._remembered:
            self._remembered = window
            if self._remember is not None:
                self._remember(window)

    def throttle(self, retry_after: float | None) -> float:
        pause = self.pacing.throttle(retry_after, self._clock.monotonic())
        self._learned()
        log.warning("model calls paused %.1fs: the provider's rate limit (429)", pause)
        return pause

    def status(self) -> GovernorStatus:
        now = self._clock.monotonic()
        return GovernorStatus(
            in_flight=self.in_flight, waiting=self.waiting, paused_s=max(0.0, self.pacing.paused_until - now),
            throttled=self.pacing.throttled, remaining=self.pacing.remaining(now),
        )
