"""Turns per person and per room, paced by token buckets (pure: ``now`` is passed in).

One member posting in twenty rooms must not start twenty full-context runs
while everyone else waits behind them. Each new turn a message would start
takes a token from its author's bucket (per guild and user; DMs per user)
and from its room's bucket; a bucket holds a minute's worth
(``CLANKIE_USER_TURNS_PER_MINUTE``, ``CLANKIE_ROOM_TURNS_PER_MINUTE``) and
refills continuously. A message that finds either bucket empty is dropped,
visibly (``rate_limited``), and spends nothing. Messages steered into a live
run and messages buffered for a catch-up start no turn, so they never count.

:meth:`Buckets.take` says whether the caller should also show the ⏳ reaction:
at most once per key per refill of a whole bucket, so a spammer gets one
hourglass, not one per message.

Bounded: a bucket that has refilled to full is the same as no bucket and is
forgotten; past ``max_keys`` the least recently used go too (forgetting a
bucket can only let a message through, never hold one back).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

DEFAULT_MAX_KEYS = 100_000


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float
    hinted: float = float("-inf")  # when the last ⏳ went out for this key


class Buckets:
    """Token buckets of ``per_minute`` capacity, refilled at ``per_minute`` a minute; 0 turns them off."""

    def __init__(self, per_minute: float, *, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        self.per_minute = per_minute
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def _level(self, key: str, now: float) -> _Bucket | None:
        bucket = self._buckets.get(key)
        if bucket is None:
            return None
        bucket.tokens = min(self.per_minute, bucket.tokens + (now - bucket.at) * self.per_minute / 60.0)
        bucket.at = now
        return bucket

    def allows(self, key: str, now: float) -> bool:
        """Whether ``key`` has a token now (takes none)."""
        if self.per_minute <= 0:
            return True
        bucket = self._level(key, now)
        return bucket is None or bucket.tokens >= 1.0

    def take(self, key: str, now: float) -> None:
        """Spend one token of ``key`` (call only after :meth:`allows` said yes for every bucket involved)."""
        if self.per_minute <= 0:
            return
        bucket = self._level(key, now) or _Bucket(self.per_minute, now)
        bucket.tokens -= 1.0
        self._buckets[key] = bucket
        self._buckets.move_to_end(key)
        self._sweep(now)

    def hint(self, key: str, now: float) -> bool:
        """Whether a refused message of ``key`` should show the ⏳ (once per minute per key)."""
        bucket = self._level(key, now)
        if bucket is not None and now - bucket.hinted < 60.0:
            return False
        if bucket is None:  # refused by another bucket (the room's): remember the hint all the same
            bucket = self._buckets[key] = _Bucket(max(self.per_minute, 0.0), now)
        bucket.hinted = now
        self._buckets.move_to_end(key)
        self._sweep(now)
        return True

    def _sweep(self, now: float) -> None:
        """Forget the oldest buckets that have refilled to full, and any past ``max_keys``."""
        while self._buckets:
            key, bucket = next(iter(self._buckets.items()))
            full = bucket.tokens + (now - bucket.at) * self.per_minute / 60.0 >= self.per_minute
            if len(self._buckets) > self.max_keys or (full and now - bucket.hinted >= 60.0):
                del self._buckets[key]
                continue
            return


class Fairness:
    """The per-person and per-room buckets admission consults for each new turn."""

    def __init__(self, user_per_minute: float, room_per_minute: float, *, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        self.users = Buckets(user_per_minute, max_keys=max_keys)
        self.rooms = Buckets(room_per_minute, max_keys=max_keys)

    @staticmethod
    def user_key(guild_id: str | None, author_id: str) -> str:
        return f"{guild_id or 'dm'}:{author_id}"

    def admit(self, guild_id: str | None, channel_id: str, author_id: str, now: float) -> bool:
        """Spend a token from both buckets if both have one; False (nothing spent) otherwise."""
        user = self.user_key(guild_id, author_id)
        if not (self.users.allows(user, now) and self.rooms.allows(channel_id, now)):
            return False
        self.users.take(user, now)
        self.rooms.take(channel_id, now)
        return True

    def hint(self, guild_id: str | None, author_id: str, now: float) -> bool:
        """Whether this person's refused message should show the ⏳ (at most once a minute per person)."""
        return self.users.hint(self.user_key(guild_id, author_id), now)
