"""Cache lifetime by pace, and cache health: pure rules over a lane's observed calls.

**The rule** (:func:`choose`). A lane's conversation is cached at its last
breakpoint. Between two turns of a lane the cache entry either survives (the
gap is within the lifetime: the next call reads the whole prefix at 0.1x
and writes only the new turn) or expires (it writes the whole prefix again).
Per turn, with ``P`` the lane's cached prefix in tokens, ``D`` the new tokens
a turn adds and ``w`` the write price of the lifetime (1.25x for 5 minutes,
2x for 1 hour, both times the input price)::

    cost(lifetime, gap) = 0.1 * P + w * D      if gap < lifetime - 30 s
                        = w * (P + D)          otherwise

(a gap within 30 seconds of the lifetime is counted as past it: it is a coin
toss whether the entry is still there).

The rule takes the lane's newest observed gaps between turns and picks the
lifetime whose mean cost over them is least (ties go to 5 minutes). With no
gap observed yet it picks 5 minutes. Example: ``P`` = 16,000, ``D`` = 500,
every gap 8 minutes: 5 minutes costs 1.25 x 16,500 = 20,625 a turn, 1 hour
0.1 x 16,000 + 2 x 500 = 2,600; a burst (gaps of seconds) costs 1,600 + 625
= 2,225 with 5 minutes and 2,600 with 1 hour. ``docs/spend.md`` has the rest.

**Cache health** (:class:`Health`). A call is *warm* when the lane's
previous call was within that call's lifetime, so its conversation should be
read from the cache. A warm call whose cache-read share of input tokens is
under the threshold (0.7) means the prefix changed (a timestamp in the system
prompt, a reordered tool): the lane is reported, once until a warm call reads
well again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

Lifetime = Literal["5m", "1h"]
SECONDS: dict[Lifetime, float] = {"5m": 300.0, "1h": 3600.0}
WRITE: dict[Lifetime, float] = {"5m": 1.25, "1h": 2.0}
READ = 0.1
MARGIN = 30.0  # a gap this close to a lifetime counts as past it: the entry's age is measured from the last call


def survives(lifetime: Lifetime, gap: float) -> bool:
    """Whether a cache entry of ``lifetime`` is still there ``gap`` seconds after the call that wrote or read it."""
    return gap < SECONDS[lifetime] - MARGIN


def turn_cost(lifetime: Lifetime, gap: float, prefix: int, added: int) -> float:
    """Input-price units one turn costs after ``gap`` seconds (pure; the module docstring has the formula)."""
    if survives(lifetime, gap):
        return READ * prefix + WRITE[lifetime] * added
    return WRITE[lifetime] * (prefix + added)


def mean_cost(lifetime: Lifetime, gaps: Iterable[float], prefix: int, added: int) -> float:
    costs = [turn_cost(lifetime, g, prefix, added) for g in gaps]
    return sum(costs) / len(costs) if costs else 0.0


def choose(gaps: Iterable[float], prefix: int, added: int) -> Lifetime:
    """The lifetime whose mean cost over the observed gaps is least; 5 minutes on a tie or with no gaps."""
    seen = list(gaps)
    if not seen:
        return "5m"
    return "1h" if mean_cost("1h", seen, prefix, added) < mean_cost("5m", seen, prefix, added) else "5m"


@dataclass
class Pace:
    """One lane's (or the tree's) observed gaps between turns and its prefix and turn sizes (bounded)."""

    keep: int = 16
    gaps: deque[float] = field(default_factory=deque)
    prefix: int = 0  # tokens the last call's conversation cached (read + written + uncached input)
    added: int = 0  # tokens the newest turn added to it
    last_call_at: float | None = None

    def turn_started(self, now: float) -> None:
        """A run's first call is about to be made at ``now``: the gap since the last call is observed."""
        if self.last_call_at is not None:
            self.gaps.append(max(0.0, now - self.last_call_at))
            while len(self.gaps) > self.keep:
                self.gaps.popleft()

    def called(self, now: float, context: int, first_of_turn: bool) -> None:
        if first_of_turn and self.prefix:
            self.added = max(0, context - self.prefix)
        self.prefix = context
        self.last_call_at = now

    def lifetime(self) -> Lifetime:
        return choose(self.gaps, self.prefix, self.added or self.prefix // 10)


@dataclass
class Health:
    """One lane's cache health: its warm calls' read share, and whether it is reported as broken."""

    threshold: float = 0.7
    last_call_at: float | None = None
    last_lifetime: Lifetime = "5m"
    read: int = 0
    input: int = 0  # every input token of the lane's calls (uncached + read + written)
    broken: bool = False
    last_share: float | None = None  # of the newest warm call

    @property
    def share(self) -> float | None:
        return self.read / self.input if self.input else None

    def called(self, now: float, lifetime: Lifetime, read: int, total_input: int) -> bool:
        """Count one answered call; True when it is a warm call that trips the warning (once per drop)."""
        warm = self.last_call_at is not None and survives(self.last_lifetime, now - self.last_call_at)
        self.last_call_at, self.last_lifetime = now, lifetime
        self.read += read
        self.input += total_input
        if not warm or total_input == 0:
            return False
        self.last_share = read / total_input
        if self.last_share >= self.threshold:
            self.broken = False
            return False
        tripped = not self.broken
        self.broken = True
        return tripped
