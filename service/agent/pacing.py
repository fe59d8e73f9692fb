"""Pacing model calls to the account's rate limits: the pure core of the provider governor.

The Messages API meters an account in token buckets (requests, input tokens,
output tokens), each refilled continuously up to its limit, and reports every
bucket on every answer: ``anthropic-ratelimit-<bucket>-limit``, ``-remaining``
and ``-reset`` (when the bucket will be full again). From the newest report of
a bucket :class:`Pacing` knows its level then and its refill rate
(``(limit - remaining) / (reset - then)``), so it can tell when the next call
will find room, counting the calls started since that report against it.

A 429 pauses every call until its ``retry-after`` (or, without one, the reset
of the bucket it ran dry), not only the run that got it.

Tokens are reckoned per call from what calls have cost so far (an
exponentially weighted mean of each answer's uncached input, cache writes
included, and of its output): a lane whose prompt is mostly cached costs its
bucket little, and the estimate follows that.

**Slow start.** A pacing that knows nothing yet (a fresh start, a route
newly in use) keeps a window of calls in flight: one, or what an earlier
life learned (:attr:`Pacing.window`). Each answer widens it by one; the
first answer that reports the buckets opens it (the buckets pace from then
on), and a 429 halves it. So a crowd at start sends one call, learns, and
only then the rest, instead of discovering the limits with a burst of 429s;
a route that reports no buckets (Vertex, Bedrock) grows its window by its
answers and backs off on its 429s.

Everything here takes ``now`` (monotonic seconds); a reset is an epoch time,
turned into "seconds from now" with the wall clock the caller passes.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

BUCKETS = ("requests", "input-tokens", "output-tokens")
HEADER = "anthropic-ratelimit-{bucket}-{part}"
MAX_STARTED = 4096  # calls remembered since the oldest report (more would mean no report arrives: stop counting)
FALLBACK_PAUSE = 5.0  # a 429 that names neither a wait nor an empty bucket pauses this long
EWMA = 0.2


@dataclass(frozen=True, slots=True)
class Report:
    """One bucket as an answer described it: ``reset`` is the epoch second it will be full."""

    limit: int
    remaining: int
    reset: float | None


def reports(headers: Mapping[str, str]) -> dict[str, Report]:
    """The buckets an answer's headers describe (a bucket whose headers are missing or malformed is left out)."""
    out: dict[str, Report] = {}
    for bucket in BUCKETS:
        try:
            limit = int(headers[HEADER.format(bucket=bucket, part="limit")])
            remaining = int(headers[HEADER.format(bucket=bucket, part="remaining")])
        except (KeyError, ValueError):
            continue
        if limit <= 0 or remaining < 0:
            continue
        reset = _epoch(headers.get(HEADER.format(bucket=bucket, part="reset")))
        out[bucket] = Report(limit=limit, remaining=min(remaining, limit), reset=reset)
    return out


def _epoch(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class _Known:
    """A bucket as of the answer to call ``seq``, learned at ``seen``."""

    limit: int
    remaining: float
    rate: float | None  # refill per second; None when the report was of a full bucket or had no reset
    full_at: float  # monotonic time it is full again (``seen`` if unknown)
    seen: float
    seq: int
    owed: float = 0.0  # what calls started before ``seq`` and not yet reported may still take (see Pacing.learn)

    def level(self, now: float) -> float:
        if now >= self.full_at:
            return float(self.limit)
        if self.rate is None:
            return self.remaining
        return min(float(self.limit), self.remaining + (now - self.seen) * self.rate)

    def wait(self, need: float, now: float, spent: float) -> float:
        """Seconds from ``now`` until the bucket holds ``need`` after ``spent`` (charged since the report)."""
        need = min(need, float(self.limit))
        short = need + spent - self.level(now)
        if short <= 0:
            return 0.0
        if self.rate is None or self.rate <= 0:
            return max(0.0, self.full_at - now) or FALLBACK_PAUSE
        return short / self.rate


@dataclass(frozen=True, slots=True)
class Cost:
    """What one call is expected to take from each bucket."""

    requests: float = 1.0
    input_tokens: float = 1.0
    output_tokens: float = 1.0

    def of(self, bucket: str) -> float:
        return {"requests": self.requests, "input-tokens": self.input_tokens, "output-tokens": self.output_tokens}[bucket]


class Pacing:
    """When may the next model call start? Learned from the answers, paused by 429s."""

    def __init__(self, window: int | None = None, max_window: int = 1 << 16) -> None:
        self.max_window = max(1, max_window)
        self.window = None if window is None or window >= self.max_window else max(1, window)  # None: open
        self._known: dict[str, _Known] = {}
        self._started: deque[tuple[int, Cost]] = deque()  # calls started, oldest first, while any bucket is known
        self._unreported: dict[int, Cost] = {}  # calls started whose answer has not said anything yet, by seq
        self._seq = 0
        self.paused_until = 0.0
        self._input = 0.0
        self._output = 0.0
        self.throttled = 0  # 429s seen

    def cost(self) -> Cost:
        """The expected cost of the next call (at least one token of each, so an empty bucket holds it)."""
        return Cost(input_tokens=max(1.0, self._input), output_tokens=max(1.0, self._output))

    def delay(self, now: float) -> float:
        """Seconds the next call must wait from ``now`` (0: it may start)."""
        wait = max(0.0, self.paused_until - now)
        cost = self.cost()
        for bucket, known in self._known.items():
            spent = sum(c.of(bucket) for seq, c in self._started if seq > known.seq) + known.owed
            wait = max(wait, known.wait(cost.of(bucket), now, spent))
        return wait

    def start(self) -> int:
        """A call starts now; its sequence number names its answer."""
        self._seq += 1
        self._unreported[self._seq] = self.cost()
        if len(self._unreported) > MAX_STARTED:
            del self._unreported[min(self._unreported)]
        if self._known:
            self._started.append((self._seq, self.cost()))
            while len(self._started) > MAX_STARTED:
                self._started.popleft()
        return self._seq

    def reported(self, seq: int) -> None:
        """Call ``seq`` has said what it will say (answered, failed or given up)."""
        self._unreported.pop(seq, None)

    def learn(self, seq: int, reported: Mapping[str, Report], now: float, wall: float) -> None:
        """What the answer to call ``seq`` said of the buckets (older news than what is known is ignored).

        Calls started before ``seq`` that have not reported yet may reach the account after it (a burst's requests
        arrive in any order): what they may take is owed against the report until a newer one replaces it, so a
        report that counted none of them does not read as room for them all over again."""
        older = [c for s, c in self._unreported.items() if s < seq]
        self.reported(seq)
        for bucket, report in reported.items():
            known = self._known.get(bucket)
            if known is not None and known.seq > seq:
                continue
            until_full = max(0.0, report.reset - wall) if report.reset is not None else 0.0
            rate = (report.limit - report.remaining) / until_full if until_full > 0 and report.remaining < report.limit else None
            owed = sum(c.of(bucket) for c in older)
            self._known[bucket] = _Known(report.limit, float(report.remaining), rate, now + until_full, now, seq, owed)
        if self._known:
            oldest = min(k.seq for k in self._known.values())
            while self._started and self._started[0][0] <= oldest:
                self._started.popleft()

    def room(self, in_flight: int) -> bool:
        """May another call start with ``in_flight`` running (slow start's window)?"""
        return self.window is None or in_flight < self.window

    def answered(self) -> None:
        """A call was answered: the window opens once the buckets are known, else widens by one."""
        if self.window is None:
            return
        self.window = None if self._known or self.window + 1 >= self.max_window else self.window + 1

    def learned(self) -> int:
        """The window a later life may start with: the one reached, or half the requests bucket once it is known."""
        requests = self._known.get("requests")
        if requests is not None:
            return max(1, min(self.max_window, requests.limit // 2))
        return self.window if self.window is not None else self.max_window

    def spent(self, input_tokens: int, output_tokens: int) -> None:
        """What an answered call cost (uncached input including cache writes, and output)."""
        self._input = input_tokens if self._input == 0 else (1 - EWMA) * self._input + EWMA * input_tokens
        self._output = output_tokens if self._output == 0 else (1 - EWMA) * self._output + EWMA * output_tokens

    def throttle(self, retry_after: float | None, now: float) -> float:
        """A 429: every call waits until ``retry_after`` from now, or until the empty bucket refills. Returns the pause."""
        self.throttled += 1
        if not self._known:  # no buckets to pace by: fewer calls at once (the window grows back by answers)
            self.window = max(1, (self.window or self.max_window) // 2)
        if retry_after is None:
            dry = [k.full_at - now for k in self._known.values() if k.level(now) < 1]
            retry_after = max(dry) if dry and max(dry) > 0 else FALLBACK_PAUSE
        pause = max(0.0, retry_after)
        self.paused_until = max(self.paused_until, now + pause)
        return pause

    def remaining(self, now: float) -> dict[str, int]:
        """Each known bucket's estimated level at ``now`` (for status)."""
        return {b: math.floor(k.level(now)) for b, k in self._known.items()}
