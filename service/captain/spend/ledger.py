"""The spend ledger: each UTC day's lines, kept behind a store, and rebuilding a day from them.

The store is today's JSONL file per day under ``<state>/captain/spend/`` (:mod:`.ledger_files`) or, in the
PostgreSQL profile, rows (:mod:`clankie.store.spend_pg`); :class:`Ledger` holds the rules.

Every answered model call appends one line (``call``: the keys it counts
against, its tokens and dollars), and so does every operator move (``raise``,
``reset``) and every budget notice posted in a room (``notice``). A line is
handed to the kernel whole before the call returns, so a killed service
loses nothing; a lost or short file (a machine that lost power, a deleted
directory) is made good from the session trees, whose assistant entries
carry their ``usage`` and who they were ``charged_to``: each key's total is
the larger of what the ledger and the trees say (:func:`rebuild`). Resets
and raises live only in the ledger. Days older than ``keep_days`` are
deleted when a day is opened. Reading is synchronous file I/O; the service
does it in a worker thread at start.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clankie import spend
from clankie.jsonl import read_lines
from clankie.pricing import ModelPrice, price_of
from clankie.quiet import Quiet
from clankie.store.ports import Shard, StaleEpoch
from clankie.store.spend_ports import SpendLedgerStore
from service.captain.spend.budget import TREE, Amount, DayBudgets
from service.captain.spend.ledger_files import FileSpendLedger

log = logging.getLogger(__name__)


def utc_day(wall: float) -> str:
    return dt.datetime.fromtimestamp(wall, dt.UTC).date().isoformat()


def usd_of(prices: Mapping[str, ModelPrice], model: str, usage: Mapping[str, Any]) -> float:
    """Dollars one call's usage cost (``usage`` as the session trees and the Usage record write it)."""
    def n(name: str) -> int:
        value = usage.get(name, 0)
        return value if isinstance(value, int) and value > 0 else 0

    written_1h = min(n("cache_write_1h"), n("cache_write"))
    return price_of(prices, model).usd(input=n("input"), output=n("output"), cache_read=n("cache_read"),
                                       cache_write_5m=n("cache_write") - written_1h, cache_write_1h=written_1h)


def tokens_of(usage: Mapping[str, Any]) -> int:
    return sum(v for k, v in usage.items() if k in ("input", "output", "cache_read", "cache_write")
               and isinstance(v, int) and v > 0)


@dataclass
class DayRead:
    """What a day's ledger said besides the calls: notices posted per room key (wall time of the newest)."""

    notices: dict[str, float] = field(default_factory=dict)
    lines: int = 0


class Ledger:
    """The ledger's rules over its store: append one line, read a day back, prune old days."""

    def __init__(self, store: SpendLedgerStore | Path, keep_days: int) -> None:
        self.store: SpendLedgerStore = FileSpendLedger(store) if isinstance(store, Path) else store  # a directory: files
        self.keep_days = keep_days
        self._quiet = Quiet("spend ledger line", " (the session trees still hold every call's usage)", logger=log)

    def append(self, day: str, record: dict[str, Any], shard: Shard | None = None) -> None:
        """One line, kept before this returns; a refused write is logged once a stretch, never raised. ``shard`` is
        the shard of the room the line is about, when the caller knows it (the PostgreSQL profile fences it)."""
        try:
            self.store.append(day, record, shard)
        except OSError as exc:
            self._quiet.refused(exc.strerror or type(exc).__name__)
            return
        except StaleEpoch:  # counted by the store: this tree no longer holds the room's shard
            self._quiet.refused("stale lease epoch")
            return
        self._quiet.written()

    def replay(self, day: str, budgets: DayBudgets) -> DayRead:
        """Apply the day's lines to ``budgets`` (calls, raises, resets, in order); returns the notices."""
        read = DayRead()
        for line in self.store.lines(day):
            read.lines += 1
            kind, key = line.get("kind"), str(line.get("key", ""))
            amount = Amount(int(line.get("tokens", 0) or 0), float(line.get("usd", 0.0) or 0.0))
            if kind == "call":
                for k in line.get("keys", ()):
                    budgets.add(str(k), amount)
            elif kind == "raise" and key:
                budgets.raise_limit(key, amount)
            elif kind == "reset" and key:
                budgets.reset(key)
            elif kind == "notice" and key:
                read.notices[key] = float(line.get("at", 0.0) or 0.0)
        return read

    def prune(self, today: str) -> int:
        """Delete the days older than ``keep_days`` before ``today``; returns how many went."""
        oldest = dt.date.fromisoformat(today) - dt.timedelta(days=self.keep_days - 1)
        gone = 0
        for day in self.store.days():
            try:
                if dt.date.fromisoformat(day) < oldest:
                    self.store.delete(day)
                    gone += 1
            except (ValueError, OSError):
                continue
        return gone


def from_trees(captain_root: Path, day: str, prices: Mapping[str, ModelPrice], default_model: str) -> dict[str, Amount]:
    """Each key's raw spend on ``day`` as the session trees record it (entries without ``charged_to`` count
    for the tree only). A file whose successor in its lane began before the day holds none of its entries and is
    not read: session files are named by the injected clock's UTC stamp (``YYYYMMDDT…``), file times are not used."""
    totals: dict[str, Amount] = {}
    stamp = day.replace("-", "")
    for name in spend.TREE_DIRS:
        files = spend.trees(captain_root / name)
        for i, tree in enumerate(files):
            after = files[i + 1] if i + 1 < len(files) else None
            if after is not None and after.parent == tree.parent and after.name[:8] < stamp:
                continue  # continued in a newer file before the day began
            model = default_model
            for entry in read_lines(tree):
                if entry.get("type") == "session" and isinstance(entry.get("model"), str):
                    model = entry["model"]
                elif entry.get("type") == "model_change" and isinstance(entry.get("model"), str):
                    model = entry["model"]
                usage = entry.get("usage")
                if entry.get("type") != "message" or not isinstance(usage, dict):
                    continue
                if not str(entry.get("timestamp", "")).startswith(day):
                    continue
                amount = Amount(tokens_of(usage), usd_of(prices, model, usage))
                charged = entry.get("charged_to")
                keys = [TREE, *(str(k) for k in charged)] if isinstance(charged, list) else [TREE]
                for key in keys:
                    totals[key] = totals.get(key, Amount()) + amount
    return totals


def rebuild(ledger: Ledger, budgets: DayBudgets, captain_root: Path, prices: Mapping[str, ModelPrice],
            default_model: str) -> DayRead:
    """The day's budgets from the ledger, each key raised to what the session trees say where they say more."""
    read = ledger.replay(budgets.day, budgets)
    for key, raw in from_trees(captain_root, budgets.day, prices, default_model).items():
        budgets.at_least(key, raw)
    return read
