"""Turns per person and per room, paced by token buckets (pure: ``now`` is passed in).

One member posting in twenty rooms must not start twenty full-context runs
while everyone else waits behind them. Each new turn a message would start
takes a token from its author's bucket (per guild and user; DMs per user)
and from its room's bucket; a bucket holds a minute's worth
(``CLANKIE_USER_TURNS_PER_MINUTE``, ``CLANKIE_ROOM_TURNS_PER_MINUTE``) and
refills continuously. A message steered into a live run extends that run,
so it takes a share of a token from its author's bucket
(``CLANKIE_USER_STEER_SHARE``, half a turn by default): no one person keeps a
run alive past their pace. Messages buffered for a catch-up start no turn
and never count. A message whose author's bucket is empty waits for it
(:mod:`bridge.paced`); one whose room's bucket is empty is dropped, visibly
(``rate_limited``), and spends nothing.

:meth:`Buckets.take` says whether the caller should also show the ⏳ reaction:
at most once per key per refill of a whole bucket, so a spammer gets one
hourglass, not one per message.

Bounded: a bucket that has refilled to full is the same as no bucket and is
forgotten; past ``max_keys`` the least recently used go too (forgetting a
bucket can only let a message through, never hold one back).
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass

DEFAULT_MAX_KEYS = 100_000
EPSILON = 1e-9
"""Tokens a bucket may lack and still allow: the refill is float arithmetic, and a turn woken at the time
:meth:`Buckets.ready_at` named must find its token there."""


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

    def allows(self, key: str, now: float, cost: float = 1.0) -> bool:
        """Whether ``key`` has ``cost`` tokens now (takes none)."""
        if self.per_minute <= 0:
            return True
        bucket = self._level(key, now)
        return bucket is None or bucket.tokens >= cost - EPSILON

    def ready_at(self, key: str, now: float, cost: float = 1.0) -> float:
        """When ``key`` will have ``cost`` tokens (``now`` if it has them already)."""
        if self.per_minute <= 0:
            return now
        bucket = self._level(key, now)
        if bucket is None or bucket.tokens >= cost - EPSILON:
            return now
        return now + (cost - bucket.tokens) * 60.0 / self.per_minute

    def take(self, key: str, now: float, cost: float = 1.0) -> None:
        """Spend ``cost`` tokens of ``key`` (call only after :meth:`allows` said yes for every bucket involved)."""
        if self.per_minute <= 0:
            return
        bucket = self._level(key, now) or _Bucket(self.per_minute, now)
        bucket.tokens -= cost
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


class Pace(enum.Enum):
    """What the buckets say of one message."""

    GO = "go"  # tokens spent: it may start its turn (or be steered into the live run)
    PERSON = "person"  # its author's bucket is empty: it waits for it (bridge.paced), nothing spent
    ROOM = "room"  # its room's bucket is empty: ``rate_limited``, nothing spent


class Fairness:
    """The per-person and per-room buckets admission consults for each new turn and each steered message."""

    def __init__(self, user_per_minute: float, room_per_minute: float, *, steer_share: float = 0.5,
                 max_keys: int = DEFAULT_MAX_KEYS) -> None:
        self.users = Buckets(user_per_minute, max_keys=max_keys)
        self.rooms = Buckets(room_per_minute, max_keys=max_keys)
        self.steer_share = steer_share

    @staticmethod
    def user_key(guild_id: str | None, author_id: str) -> str:
        return f"{guild_id or 'dm'}:{author_id}"

    def admit(self, guild_id: str | None, channel_id: str, author_id: str, now: float, *, steer: bool = False) -> Pace:
        """A new turn takes a token from both buckets; a message steered into a live run (``steer``) takes
        ``steer_share`` of one from its author's alone. Nothing is spent unless every bucket involved has enough."""
        user = self.user_key(guild_id, author_id)
        cost = self.steer_share if steer else 1.0
        if not self.users.allows(user, now, cost):
            return Pace.PERSON
        if not steer and not self.rooms.allows(channel_id, now):
            return Pace.ROOM
        self.users.take(user, now, cost)
        if not steer:
            self.rooms.take(channel_id, now)
        return Pace.GO

    def ready(self, person: str, channel_id: str, now: float) -> bool:
        """Whether a turn of ``person`` in ``channel_id`` that waited for its pace may start now (takes nothing)."""
        return self.users.allows(person, now) and self.rooms.allows(channel_id, now)

    def start(self, person: str, channel_id: str, now: float) -> None:
        """Spend a turn's tokens for a waiting turn :meth:`ready` let go."""
        self.users.take(person, now)
        self.rooms.take(channel_id, now)

    def ready_at(self, person: str, channel_id: str, now: float) -> float:
        """When a waiting turn of ``person`` in ``channel_id`` may start (``now`` if it may)."""
        return max(self.users.ready_at(person, now), self.rooms.ready_at(channel_id, now))

    def hint(self, guild_id: str | None, author_id: str, now: float) -> bool:
        """Whether this person's refused message should show the ⏳ (at most once a minute per person)."""
        return self.users.hint(self.user_key(guild_id, author_id), now)
