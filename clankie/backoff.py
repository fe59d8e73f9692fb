"""Restart and reconnect backoff: full jitter, a cap, and a reset after a quiet spell.

Pure: the caller passes ``now`` and the random source, so tests are exact.
"""

from __future__ import annotations

import random
from collections.abc import Callable


class Backoff:
    """``delay(now)`` returns how long to wait before the next attempt.

    The n-th consecutive attempt waits a uniform random time in
    ``[0, min(cap, base * 2**n)]`` (AWS "full jitter"). If the previous
    attempt was more than ``reset_after`` seconds ago, the sequence starts
    over: a child that ran for a while and then crashed is not punished for
    crashes long past.
    """

    def __init__(
        self,
        base: float = 0.1,
        cap: float = 30.0,
        reset_after: float = 60.0,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.base = base
        self.cap = cap
        self.reset_after = reset_after
        self._rand = rand
        self._attempts = 0
        self._last: float | None = None

    @property
    def attempts(self) -> int:
        return self._attempts

    def ceiling(self) -> float:
        """The largest delay the next attempt could get."""
        return min(self.cap, self.base * (2 ** min(self._attempts, 62)))

    def delay(self, now: float) -> float:
        if self._last is not None and now - self._last > self.reset_after:
            self._attempts = 0
        ceiling = self.ceiling()
        self._attempts += 1
        self._last = now
        return self._rand() * ceiling

    def reset(self) -> None:
        self._attempts = 0
        self._last = None
