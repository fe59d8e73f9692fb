"""The service's spend: day budgets checked before every model call, cache lifetimes by pace, cache health.

:class:`Spending` is built once by the service. It holds today's
:class:`~service.captain.spend.budget.DayBudgets` (rebuilt at start from the
ledger and the session trees: :mod:`service.captain.spend.ledger`), the
tree's pace and each lane's pace and cache health (:mod:`service.captain.spend.cache_lifetime`),
and hands each lane a :class:`LaneMeter`, the agent's
:class:`~service.agent.config.Meter`. It also answers the operator
(``clankiectl budget``) and says what the heartbeat and ``lanes`` show.
See ``docs/spend.md``.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from clankie.clock import Clock
from clankie.pricing import price_of
from clankie.protocol import Caller, Room, Tokens
from clankie.settings import Settings
from clankie.store.ports import Shard
from clankie.store.spend_ports import SpendLedgerStore
from service.agent.model import CacheTtl
from service.agent.outcome import OutcomeKind, Usage
from service.captain.spend.budget import TREE, Amount, DayBudgets, Scope, Standing
from service.captain.spend.cache_lifetime import Health, Pace
from service.captain.spend.ledger import Ledger, rebuild, utc_day

log = logging.getLogger(__name__)
T = TypeVar("T")

NOTICE_SECONDS = 3600.0  # a room hears that today's budget is spent at most once an hour
NOTICE = "Today's budget for me is spent, so I can't answer until it resets at midnight UTC."


def room_key(room: Room) -> str:
    """``room:<guild|dm>/<channel>``: a room's budget key (``local`` is the guild of ``say`` rooms)."""
    return f"room:{room.guild_id or 'dm'}/{room.channel_id}"


def user_key(user_id: str) -> str:
    return f"user:{user_id}"


_KEY = re.compile(r"tree|room:(?:[0-9]{1,21}|dm|local)/[A-Za-z0-9_-]{1,64}|user:[A-Za-z0-9_-]{1,64}")


def budget_key(spec: str) -> str | None:
    """An operator's budget key as the budgets spell it (``tree``, ``room:<guild|dm>/<channel>``,
    ``user:<id>``), or None when it is not one."""
    spec = spec.strip()
    return spec if _KEY.fullmatch(spec) else None


def _amount(settings: Settings, scope: Scope) -> Amount:
    prefix = {Scope.TREE: "budget_day", Scope.ROOM: "budget_room_day", Scope.USER: "budget_user_day"}[scope]
    return Amount(getattr(settings, f"{prefix}_tokens"), getattr(settings, f"{prefix}_usd"))


class Spending:
    """Budgets, ledger, paces and cache health for every lane of the service."""

    def __init__(self, settings: Settings, clock: Clock, captain_root: Path, *,
                 ledger: Path | SpendLedgerStore | None = None, shard: Callable[[Room], Shard] | None = None) -> None:
        self.settings = settings
        self.clock = clock
        self._root = captain_root
        self.limits = {scope: _amount(settings, scope) for scope in Scope}
        self.ledger = Ledger(captain_root / "spend" if ledger is None else ledger, settings.budget_ledger_days)
        self.shard = shard  # the shard a room's lines are fenced by (the PostgreSQL profile); None: not said
        self.budgets = DayBudgets(self.limits, day=utc_day(clock.wall()), max_keys=settings.budget_max_keys)
        self.notices: OrderedDict[str, float] = OrderedDict()  # room key -> wall time of its last notice
        self.tree_pace = Pace(keep=settings.cache_pace_gaps)
        self.paces: OrderedDict[str, Pace] = OrderedDict()
        self.health: OrderedDict[str, Health] = OrderedDict()
        self.tree_health = Health(threshold=settings.cache_health_min_share)
        self.mean_call = Amount()  # the tree's newest call, the estimate for a lane's first

    # -- the day ---------------------------------------------------------------

    def load(self) -> None:
        """Rebuild today's totals from the ledger and the session trees (synchronous: run it in a thread)."""
        read = rebuild(self.ledger, self.budgets, self._root, self.settings.model_prices, self.settings.model)
        self.notices.update(read.notices)
        self.ledger.prune(self.budgets.day)
        tree = self.budgets.standing(TREE)
        log.info("spend today (%s): %d tokens, $%.4f, from %d ledger lines and the session trees",
                 self.budgets.day, tree.spent.tokens, tree.spent.usd, read.lines)
        if TREE in self.unbounded():
            log.warning("spend: the tree has no day budget (CLANKIE_BUDGET_DAY_USD and CLANKIE_BUDGET_DAY_TOKENS are 0): "
                        "a day's spend is bounded only by each room's and each person's budget")

    def roll(self) -> None:
        """A new UTC day: fresh totals (raises and resets were for the day that ended)."""
        today = utc_day(self.clock.wall())
        if today != self.budgets.day:
            log.info("spend: a new UTC day (%s); yesterday's totals are in its ledger", today)
            self.budgets = DayBudgets(self.limits, day=today, max_keys=self.settings.budget_max_keys)
            self.notices.clear()
            self.ledger.prune(today)

    def unbounded(self) -> tuple[str, ...]:
        """The scopes with no day budget in either unit now (``tree``, ``room``, ``user``); the tree's counts an
        operator's raise. Said at start, in the status line, the heartbeat and ``clankie_budget_unbounded``."""
        tree = () if self.budgets.limited(TREE) else (TREE,)
        return tree + tuple(s.value for s in (Scope.ROOM, Scope.USER) if not (self.limits[s].tokens or self.limits[s].usd))

    # -- lanes -----------------------------------------------------------------

    def meter(self, lane: str, room: Room, payer: Callable[[], str | None]) -> LaneMeter:
        return LaneMeter(self, lane, room, payer)

    def pace(self, lane: str) -> Pace:
        return self._held(self.paces, lane, lambda: Pace(keep=self.settings.cache_pace_gaps))

    def lane_health(self, lane: str) -> Health:
        return self._held(self.health, lane, lambda: Health(threshold=self.settings.cache_health_min_share))

    def _held(self, table: OrderedDict[str, T], lane: str, make: Callable[[], T]) -> T:
        found = table.get(lane)
        if found is None:
            found = table[lane] = make()
            while len(table) > self.settings.budget_max_keys:
                table.popitem(last=False)
        table.move_to_end(lane)
        return found

    def spent_key(self, room: Room, user: str | None) -> str | None:
        """The first budget (tree, room, person) with nothing left for a turn starting now, else None."""
        self.roll()
        keys = self.keys(room, user)
        standings = [self.budgets.standing(k) for k in keys]
        return next((s.key for s in standings if s.exhausted), None)

    def keys(self, room: Room, user: str | None) -> tuple[str, ...]:
        return (TREE, room_key(room)) + ((user_key(user),) if user else ())

    def notice_due(self, room: Room) -> bool:
        """Whether this room may hear the budget notice now; if so it is recorded as heard (once an hour)."""
        key, now = room_key(room), self.clock.wall()
        last = self.notices.get(key)
        if last is not None and now - last < NOTICE_SECONDS:
            return False
        self.notices[key] = now
        self.notices.move_to_end(key)
        while len(self.notices) > self.settings.budget_max_keys:
            self.notices.popitem(last=False)
        self.ledger.append(self.budgets.day, {"at": now, "kind": "notice", "key": key}, self.shard_of(room))
        return True

    def shard_of(self, room: Room) -> Shard | None:
        """The shard ``room``'s ledger lines are written under, when this profile says."""
        return None if self.shard is None else self.shard(room)

    # -- the operator ----------------------------------------------------------

    def operate(self, action: str, key: str, tokens: int | None, usd: float | None, *,
                caller: Caller | None = None) -> Standing:
        """``raise`` a budget for the rest of the day, or ``reset`` what a key spent; written to the ledger with who
        asked (``caller``: its pid and uid on ``control.sock``)."""
        self.roll()
        who = {} if caller is None else {"caller_pid": caller.pid, "caller_uid": caller.uid}
        if action == "raise":
            have = self.budgets.limit(key)
            limit = Amount(have.tokens if tokens is None else tokens, have.usd if usd is None else usd)
            standing = self.budgets.raise_limit(key, limit)
            self.ledger.append(self.budgets.day, {"at": self.clock.wall(), "kind": "raise", "key": key,
                                                  "tokens": limit.tokens, "usd": limit.usd, **who})
        else:
            standing = self.budgets.reset(key)
            self.ledger.append(self.budgets.day, {"at": self.clock.wall(), "kind": "reset", "key": key, **who})
        log.warning("operator (pid %s uid %s): budget %s %s -> limit %d tokens $%.4f, spent %d tokens $%.4f",
                    who.get("caller_pid", "?"), who.get("caller_uid", "?"), action, key,
                    standing.limit.tokens, standing.limit.usd, standing.spent.tokens, standing.spent.usd)
        return standing

    # -- what is shown ---------------------------------------------------------

    def report(self) -> dict[str, object]:
        """The heartbeat's budget and cache figures (the tree's remaining budget first)."""
        self.roll()
        tree = self.budgets.standing(TREE)
        return {"budget_day": self.budgets.day, "budget_tokens_spent": tree.spent.tokens,
                "budget_usd_spent": round(tree.spent.usd, 6), "budget_tokens_limit": tree.limit.tokens,
                "budget_usd_limit": tree.limit.usd, "budget_tokens_left": tree.tokens_left,
                "budget_usd_left": None if tree.usd_left is None else round(tree.usd_left, 6),
                "budget_unbounded": list(self.unbounded()),
                "budget_keys_forgotten": self.budgets.forgotten, "budget_warned": list(self.budgets.warned[:10]),
                "cache_read_share": None if self.tree_health.share is None else round(self.tree_health.share, 4),
                "cache_lanes_broken": sorted(k for k, h in self.health.items() if h.broken)[:10]}

    def detail(self) -> str:
        """The status line's part: the tree's budget and what is left, the per-room and per-person limits, the cache."""
        tree = self.budgets.standing(TREE)
        parts = [f"spent {_tokens(tree.spent.tokens)} tok ${tree.spent.usd:.2f}"]
        if tree.tokens_left is not None:
            parts.append(f"left {_tokens(max(0, tree.tokens_left))}/{_tokens(tree.limit.tokens)} tok")
        if tree.usd_left is not None:
            parts.append(f"left ${max(0.0, tree.usd_left):.2f}/${tree.limit.usd:.2f}")
        if tree.tokens_left is None and tree.usd_left is None:
            parts.append("no tree budget")
        for scope in (Scope.ROOM, Scope.USER):
            limit = self.limits[scope]
            if limit.tokens or limit.usd:
                spent = sum(1 for k in self.budgets.keys() if k.startswith(scope.value + ":")
                            and self.budgets.standing(k).exhausted)
                parts.append(f"{scope.value} {_limit(limit)} ({spent} spent)")
        share = self.tree_health.share
        if share is not None:
            parts.append(f"cache read {share:.0%}")
        warned = self.budgets.warned
        if warned:  # the 80 % warning, first in line so a long status line never cuts it
            more = f" +{len(warned) - 2}" if len(warned) > 2 else ""
            return f"!! budget 80% spent: {', '.join(warned[:2])}{more}; budget: " + ", ".join(parts)
        return "budget: " + ", ".join(parts)

    def lane_view(self, lane: str, room: Room) -> dict[str, object]:
        """``lanes`` fields: the room's budget left, the lane's cache-read share and chosen lifetime."""
        standing = self.budgets.standing(room_key(room))
        health, pace = self.health.get(lane), self.paces.get(lane)
        return {"budget_key": standing.key, "budget_tokens_left": standing.tokens_left,
                "budget_usd_left": None if standing.usd_left is None else round(standing.usd_left, 6),
                "spent_today_tokens": standing.spent.tokens, "spent_today_usd": round(standing.spent.usd, 6),
                "cache_read_share": None if health is None or health.share is None else round(health.share, 4),
                "cache_lifetime": None if pace is None else self.lifetimes(pace)[1]}

    def lifetimes(self, pace: Pace) -> tuple[CacheTtl, CacheTtl]:
        """(shared prefix, conversation): fixed by ``CLANKIE_CACHE_LIFETIME``, or by pace (the prefix never shorter)."""
        fixed = self.settings.cache_lifetime
        if fixed != "pace":
            return fixed, fixed
        lane = pace.lifetime()
        return ("1h" if lane == "1h" else self.tree_pace.lifetime()), lane


def _tokens(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1_000_000 else f"{n / 1e3:.1f}k" if n >= 1000 else str(n)


def _limit(limit: Amount) -> str:
    return " ".join(x for x in (f"{_tokens(limit.tokens)} tok" if limit.tokens else "",
                                f"${limit.usd:.2f}" if limit.usd else "") if x)


class LaneMeter:
    """One lane's :class:`~service.agent.config.Meter`: budgets before each call, pace and health after."""

    def __init__(self, spending: Spending, lane: str, room: Room, payer: Callable[[], str | None]) -> None:
        self._sp = spending
        self.lane = lane
        self.room = room
        self._payer = payer
        self._keys: tuple[str, ...] = ()
        self._first = False  # the run's first call is not answered yet
        self._gap_seen = False  # the run's gap since the lane's last call is observed (once, retries aside)
        self._last = Amount()
        self._lifetime: CacheTtl = "5m"

    def begin_run(self) -> None:
        """A run starts: its first call is a turn after the lane's last (a gap the pace rule observes)."""
        self._first, self._gap_seen = True, False

    def end_run(self) -> None:
        self._sp.budgets.release(self.lane)

    def refusal(self) -> OutcomeKind | None:
        sp = self._sp
        sp.roll()
        self._keys = sp.keys(self.room, self._payer())
        estimate = self._last if self._last.tokens else sp.mean_call
        spent = sp.budgets.refusal(self.lane, self._keys, estimate)
        if spent is not None:
            log.warning("lane %s: budget %s is spent; no model call", self.lane, spent)
            return OutcomeKind.BUDGET_EXHAUSTED
        if self._first and not self._gap_seen:
            self._gap_seen = True
            sp.pace(self.lane).turn_started(sp.clock.monotonic())
        return None

    def lifetimes(self) -> tuple[CacheTtl, CacheTtl]:
        prefix, self._lifetime = self._sp.lifetimes(self._sp.pace(self.lane))
        return prefix, self._lifetime

    def tags(self) -> dict[str, object]:
        return {"charged_to": list(self._keys[1:])}

    def charged(self, usage: Usage, model: str, summary: bool) -> None:
        sp, now = self._sp, self._sp.clock.monotonic()
        tokens = Tokens(**usage.to_json())
        usd = price_of(sp.settings.model_prices, model).usd(
            input=usage.input, output=usage.output, cache_read=usage.cache_read,
            cache_write_5m=usage.cache_write - usage.cache_write_1h, cache_write_1h=usage.cache_write_1h)
        amount = self._last = sp.mean_call = Amount(tokens.billed, usd)
        for crossed in sp.budgets.charge(self.lane, self._keys, amount):
            log.warning("budget %s is 80%% spent: %d of %d tokens, $%.4f of $%.2f", crossed.key,
                        crossed.spent.tokens, crossed.limit.tokens, crossed.spent.usd, crossed.limit.usd)
        sp.ledger.append(sp.budgets.day, {"at": sp.clock.wall(), "kind": "call", "lane": self.lane,
                                          "keys": list(self._keys), "tokens": amount.tokens, "usd": round(usd, 9)},
                         sp.shard_of(self.room))
        if summary:  # a compaction's summary call has its own prompt: not the lane's cache
            return
        total_input = usage.input + usage.cache_read + usage.cache_write
        sp.tree_pace.turn_started(now)
        sp.tree_pace.called(now, total_input, True)
        sp.tree_health.called(now, self._lifetime, usage.cache_read, total_input)
        sp.pace(self.lane).called(now, total_input, self._first)
        self._first = False
        health = sp.lane_health(self.lane)
        if health.called(now, self._lifetime, usage.cache_read, total_input):
            log.warning("cache health: warm lane %s read only %.0f%% of its input from the cache (under %.0f%%): "
                        "something in its prefix changed", self.lane, 100 * (health.last_share or 0.0),
                        100 * health.threshold)
