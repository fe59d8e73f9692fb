"""Day budgets, pure: what the tree, each room and each person spent today, against what they may spend.

:class:`DayBudgets` holds one UTC day's totals per *scope key* (the tree,
``room:<guild|dm>/<channel>``, ``user:<id>``), in tokens (every kind billed)
and dollars (by the price table). A model call may start only while every
budget it counts against has something left once the calls other lanes have
in flight are counted at their estimates (:meth:`DayBudgets.refusal`), so
the overshoot is bounded by about one call's worth. The operator may raise a
budget for the rest of the day or reset what a key has spent
(:meth:`DayBudgets.raise_limit`, :meth:`DayBudgets.reset`); both are
ledger lines, so a restart keeps them. Crossing 80 % of a budget is reported
once per key and day. Held keys are bounded (``max_keys``): past it the
room or person charged least recently is forgotten from memory and counts
from nothing if it comes back that day (its calls stay in the ledger, and a
restart reads them again; :attr:`DayBudgets.forgotten` counts them). No
clock, no I/O: every method takes what it needs.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

WARN_SHARE = 0.8
TREE = "tree"


class Scope(enum.StrEnum):
    TREE = "tree"
    ROOM = "room"
    USER = "user"


def scope_of(key: str) -> Scope:
    """``tree``, ``room:…`` or ``user:…``: the scope a key belongs to."""
    return Scope(key.split(":", 1)[0])


@dataclass(frozen=True, slots=True)
class Amount:
    """Tokens and dollars together (a spend, a limit, or what is left)."""

    tokens: int = 0
    usd: float = 0.0

    def __add__(self, other: Amount) -> Amount:
        return Amount(self.tokens + other.tokens, self.usd + other.usd)

    def __sub__(self, other: Amount) -> Amount:
        return Amount(self.tokens - other.tokens, self.usd - other.usd)


NOTHING = Amount()


@dataclass(frozen=True, slots=True)
class Standing:
    """One key's day: what it spent, its limits (0: none), what is left (None: no limit)."""

    key: str
    spent: Amount
    limit: Amount
    tokens_left: int | None
    usd_left: float | None

    @property
    def exhausted(self) -> bool:
        return (self.tokens_left is not None and self.tokens_left <= 0) or (self.usd_left is not None and self.usd_left <= 0)


def _left(limit: Amount, used: Amount) -> tuple[int | None, float | None]:
    tokens = limit.tokens - used.tokens if limit.tokens > 0 else None
    usd = limit.usd - used.usd if limit.usd > 0 else None
    return tokens, usd


def _share(limit: Amount, used: Amount) -> float:
    shares = [used.tokens / limit.tokens if limit.tokens > 0 else 0.0, used.usd / limit.usd if limit.usd > 0 else 0.0]
    return max(shares)


class DayBudgets:
    """One UTC day's spend per scope key against its limits; bounded, pure."""

    def __init__(self, limits: dict[Scope, Amount], *, day: str, max_keys: int = 100_000) -> None:
        self.limits = dict(limits)
        self.day = day
        self.max_keys = max_keys
        self._spent: OrderedDict[str, Amount] = OrderedDict()  # raw spend, least recently charged first
        self._offset: dict[str, Amount] = {}  # what a reset took off
        self._raised: dict[str, Amount] = {}  # an operator's limit for the rest of the day
        self._reserved: dict[str, tuple[tuple[str, ...], Amount]] = {}  # lane -> (its keys, its call's estimate)
        self._in_flight: dict[str, Amount] = {}  # key -> sum of the reservations counting against it
        self._warned: set[str] = set()
        self.forgotten = 0

    # -- reading ---------------------------------------------------------------

    def limit(self, key: str) -> Amount:
        return self._raised.get(key, self.limits.get(scope_of(key), NOTHING))

    def used(self, key: str) -> Amount:
        return self._spent.get(key, NOTHING) - self._offset.get(key, NOTHING)

    def standing(self, key: str) -> Standing:
        limit, used = self.limit(key), self.used(key)
        tokens, usd = _left(limit, used)
        return Standing(key=key, spent=used, limit=limit, tokens_left=tokens, usd_left=usd)

    def limited(self, key: str) -> bool:
        limit = self.limit(key)
        return limit.tokens > 0 or limit.usd > 0

    def keys(self) -> Iterable[str]:
        return tuple(self._spent)

    @property
    def warned(self) -> tuple[str, ...]:
        """The keys past 80 % of a budget today, the tree first."""
        return tuple(sorted(self._warned, key=lambda k: (k != TREE, k)))

    # -- the gate --------------------------------------------------------------

    def refusal(self, lane: str, keys: tuple[str, ...], estimate: Amount) -> str | None:
        """The first of ``keys`` whose budget is spent (other lanes' calls in flight counted), else None.

        A call let through reserves ``estimate`` against its keys until :meth:`charge` (or the lane's next
        call, or :meth:`release`) replaces it: a lane has one call in flight at a time.
        """
        self.release(lane)
        for key in keys:
            if not self.limited(key):
                continue
            tokens, usd = _left(self.limit(key), self.used(key) + self._in_flight.get(key, NOTHING))
            if (tokens is not None and tokens <= 0) or (usd is not None and usd <= 0):
                return key
        self._reserved[lane] = (keys, estimate)
        for key in keys:
            self._in_flight[key] = self._in_flight.get(key, NOTHING) + estimate
        return None

    def release(self, lane: str) -> None:
        """Forget the lane's reservation (its call was answered, failed, or its run ended)."""
        held = self._reserved.pop(lane, None)
        if held is None:
            return
        keys, estimate = held
        for key in keys:
            left = self._in_flight.get(key, NOTHING) - estimate
            if left.tokens <= 0 and left.usd <= 1e-12:
                self._in_flight.pop(key, None)
            else:
                self._in_flight[key] = left

    def charge(self, lane: str | None, keys: tuple[str, ...], spent: Amount) -> list[Standing]:
        """Add a call's spend to each key; returns the keys that crossed 80 % of a budget just now."""
        if lane is not None:
            self.release(lane)
        crossed = []
        for key in keys:
            self.add(key, spent)
            if key not in self._warned and self.limited(key) and _share(self.limit(key), self.used(key)) >= WARN_SHARE:
                self._warned.add(key)
                crossed.append(self.standing(key))
        return crossed

    def add(self, key: str, spent: Amount) -> None:
        """Raw spend for ``key`` (a call, or a rebuild from the ledger or the session trees)."""
        self._spent[key] = self._spent.get(key, NOTHING) + spent
        self._spent.move_to_end(key)
        self._bound()

    def at_least(self, key: str, raw: Amount) -> None:
        """Raise ``key``'s raw spend to ``raw`` where it is below (a rebuild that found more in the trees)."""
        have = self._spent.get(key, NOTHING)
        self._spent[key] = Amount(max(have.tokens, raw.tokens), max(have.usd, raw.usd))
        self._bound()

    # -- the operator ----------------------------------------------------------

    def raise_limit(self, key: str, limit: Amount) -> Standing:
        """``key``'s limit for the rest of the day (0 in a field: no limit of that kind)."""
        self._raised[key] = limit
        self._warned.discard(key)
        return self.standing(key)

    def reset(self, key: str) -> Standing:
        """What ``key`` spent today counts as nothing from now on."""
        self._offset[key] = self._spent.get(key, NOTHING)
        self._warned.discard(key)
        return self.standing(key)

    def _bound(self) -> None:
        while len(self._spent) > self.max_keys:
            for key in self._spent:  # least recently charged first; the tree is never forgotten
                if key != TREE and key not in self._in_flight:
                    del self._spent[key]
                    self._offset.pop(key, None)
                    self._warned.discard(key)
                    self.forgotten += 1
                    break
            else:
                return
