"""Restart and reconnect backoff (full jitter, a cap, a reset after a quiet spell) and the retry schedule.

Pure: the caller passes ``now`` and the random source, so tests are exact.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


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
        return min(self.cap, self.base * (2.0 ** min(self._attempts, 62)))

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


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """When to retry a transient failure, and after how long: the one retry schedule.

    ``attempts`` calls in all (the first included); retry ``n`` (1-based) waits
    ``min(cap, base * 2**(n-1))``, or, with ``jitter``, a uniform time up to
    that (full jitter, as :class:`Backoff`). A server's ``retry-after`` replaces
    a shorter wait up to ``max_retry_after``; one beyond it gives up when
    ``give_up_beyond`` and is cut to ``max_retry_after`` otherwise. The
    defaults are the bridge's Discord schedule; the agent's provider schedule
    is ``service.agent.retry.AGENT_RETRY``.
    """

    attempts: int = 6
    base: float = 1.0
    cap: float = 30.0
    jitter: bool = True
    max_retry_after: float = 120.0
    give_up_beyond: bool = False

    @property
    def max_retries(self) -> int:
        return self.attempts - 1

    def ceiling(self, retry: int) -> float:
        """The longest own wait before retry number ``retry`` (1-based)."""
        return min(self.cap, self.base * 2.0 ** min(retry - 1, 62))

    def delay(self, retry: int, retry_after: float | None, rand: Callable[[], float] = random.random) -> float | None:
        """Seconds to wait before retry number ``retry`` (1-based), or None to give up."""
        if retry > self.max_retries:
            return None
        own = self.ceiling(retry) * (rand() if self.jitter else 1.0)
        if retry_after is None:
            return own
        if retry_after > self.max_retry_after:
            if self.give_up_beyond:
                return None
            retry_after = self.max_retry_after
        return max(own, retry_after)
