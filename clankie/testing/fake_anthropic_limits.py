"""The fake Anthropic's rate limits: token buckets that answer the way the Messages API does.

The API limits an organisation by requests, input tokens and output tokens
per minute, each a token bucket that refills continuously up to its limit
(not a window that resets all at once). Every response carries the state of
each bucket in ``anthropic-ratelimit-*`` headers: ``-limit``, ``-remaining``
and ``-reset`` (an RFC 3339 time at which the bucket is full again); the
``anthropic-ratelimit-tokens-*`` trio repeats the most restrictive of the two
token buckets. A request that finds a bucket short is refused with status 429,
an error body of type ``rate_limit_error`` and a ``retry-after`` header in
whole seconds, and is not charged.

A request is charged one request and its uncached input tokens when it is
admitted; its output tokens are charged once its answer is chosen. It is
admitted while the output bucket is not empty (the API estimates output from
``max_tokens`` and corrects it afterwards; this fake only corrects).

:class:`Limiter` is a pure core: every call takes ``now`` (monotonic seconds)
and, for headers, ``wall`` (epoch seconds).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class RateLimits:
    """What the fake allows per ``window`` seconds; None leaves that dimension unlimited."""

    requests: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    window: float = 60.0


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request the buckets cannot take yet: ``wait`` seconds until ``bucket`` has enough."""

    wait: float
    bucket: str


class Bucket:
    """One token bucket: ``limit`` tokens, refilled at ``limit / window`` per second, full at first."""

    def __init__(self, limit: int, window: float, now: float) -> None:
        self.limit = limit
        self.rate = limit / window
        self._level = float(limit)
        self._at = now

    def level(self, now: float) -> float:
        return min(float(self.limit), self._level + (now - self._at) * self.rate)

    def take(self, amount: float, now: float) -> None:
        """Charge ``amount`` (the level may go below zero: an answer longer than what was left)."""
        self._level = self.level(now) - amount
        self._at = now

    def wait(self, amount: float, now: float) -> float:
        """Seconds until the level reaches ``amount`` (capped at the limit); 0 if it already has."""
        short = min(amount, float(self.limit)) - self.level(now)
        return max(0.0, short / self.rate)

    def full_in(self, now: float) -> float:
        return max(0.0, (self.limit - self.level(now)) / self.rate)


class Limiter:
    """The buckets of one fake organisation."""

    def __init__(self, limits: RateLimits, now: float) -> None:
        self.limits = limits
        self.buckets: dict[str, Bucket] = {}
        for name, limit in (("requests", limits.requests), ("input-tokens", limits.input_tokens),
                            ("output-tokens", limits.output_tokens)):
            if limit is not None:
                self.buckets[name] = Bucket(limit, limits.window, now)
        self.refused = 0

    def admit(self, input_tokens: int, now: float) -> Refusal | None:
        """Charge an arriving request and return None, or say why it must wait and how long (nothing charged)."""
        needs = {"requests": 1.0, "input-tokens": float(input_tokens), "output-tokens": 1.0}
        waits = sorted(((b.wait(needs[name], now), name) for name, b in self.buckets.items()), reverse=True)
        if waits and waits[0][0] > 0:
            self.refused += 1
            return Refusal(wait=waits[0][0], bucket=waits[0][1])
        for name, bucket in self.buckets.items():
            if name != "output-tokens":
                bucket.take(needs[name], now)
        return None

    def answered(self, output_tokens: int, now: float) -> None:
        """Charge an answer's output tokens."""
        bucket = self.buckets.get("output-tokens")
        if bucket is not None:
            bucket.take(float(output_tokens), now)

    def headers(self, now: float, wall: float) -> dict[str, str]:
        """The ``anthropic-ratelimit-*`` headers of a response sent at ``now``."""
        out: dict[str, str] = {}
        tightest: tuple[float, str] | None = None
        for name, bucket in self.buckets.items():
            level = bucket.level(now)
            out[f"anthropic-ratelimit-{name}-limit"] = str(bucket.limit)
            out[f"anthropic-ratelimit-{name}-remaining"] = str(max(0, math.floor(level)))
            out[f"anthropic-ratelimit-{name}-reset"] = rfc3339(wall + bucket.full_in(now))
            if name != "requests" and (tightest is None or level / bucket.limit < tightest[0]):
                tightest = (level / bucket.limit, name)
        if tightest is not None:
            for part in ("limit", "remaining", "reset"):
                out[f"anthropic-ratelimit-tokens-{part}"] = out[f"anthropic-ratelimit-{tightest[1]}-{part}"]
        return out

    def refusal(self, refused: Refusal, now: float, wall: float) -> tuple[dict[str, str], str]:
        """The headers and message of the 429 for a refused request."""
        headers = {**self.headers(now, wall), "retry-after": str(max(1, math.ceil(refused.wait)))}
        limit = self.buckets[refused.bucket].limit
        what = refused.bucket.replace("-", " ")
        message = (f"This request would exceed your organization's rate limit of {limit} {what} "
                   f"per {self.limits.window:g} seconds.")
        return headers, message


def rfc3339(epoch: float) -> str:
    """``epoch`` as the API writes a reset time: UTC, whole seconds rounded up, with a ``Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(math.ceil(epoch)))
