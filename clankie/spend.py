"""Tokens spent, read back from the session trees the captain already writes (no new bookkeeping).

Every assistant ``message`` entry of a session tree carries the provider's
``usage`` (``input`` — the uncached remainder —, ``cache_read``,
``cache_write``, ``output``) and an ISO ``timestamp``. These helpers sum them:
per directory (one lane's trees) and per UTC day over every tree under
``<state>/captain``. They only read; a torn or unreadable line is skipped.
Reading is synchronous file I/O: callers on an event loop run it in a thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from clankie.jsonl import read_lines
from clankie.protocol import Tokens

TREE_DIRS = ("rooms", "system", "turns")  # where session trees live under <state>/captain


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def add(total: Tokens, usage: Mapping[str, Any]) -> Tokens:
    """``total`` plus one entry's usage (missing or malformed counts are zero)."""
    return Tokens(
        input=total.input + _count(usage.get("input")),
        cache_read=total.cache_read + _count(usage.get("cache_read")),
        cache_write=total.cache_write + _count(usage.get("cache_write")),
        output=total.output + _count(usage.get("output")),
        cache_write_1h=total.cache_write_1h + _count(usage.get("cache_write_1h")),
    )


def of_entries(entries: Iterable[Mapping[str, Any]], day: str | None = None) -> Tokens:
    """The usage of every message entry (on ``day``, ``YYYY-MM-DD`` UTC, when given) summed (pure)."""
    total = Tokens()
    for entry in entries:
        usage = entry.get("usage")
        if entry.get("type") != "message" or not isinstance(usage, dict):
            continue
        if day is not None and not str(entry.get("timestamp", "")).startswith(day):
            continue
        total = add(total, usage)
    return total


def trees(directory: Path) -> list[Path]:
    """Every session file under ``directory``, in name order."""
    try:
        return sorted(p for p in directory.rglob("*.jsonl") if p.is_file())
    except OSError:
        return []


def of_directory(directory: Path, day: str | None = None) -> Tokens:
    """Everything spent in the session trees under ``directory`` (one lane's)."""
    total = Tokens()
    for tree in trees(directory):
        total = total + of_entries(read_lines(tree), day)
    return total


def of_day(captain_root: Path, day: str) -> Tokens:
    """Everything every lane spent on ``day`` (UTC), from the trees under ``<state>/captain``."""
    total = Tokens()
    for name in TREE_DIRS:
        total = total + of_directory(captain_root / name, day)
    return total
