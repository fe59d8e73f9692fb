"""Which old session files of one lane to delete, by age and by count, and deleting them.

A lane's directory holds its session files, named ``<UTC stamp>Z_<id8>.jsonl``
by the injected clock, newest last: the current one plus the ones it
continued at each compaction (and files moved aside as ``.broken``). A file's
age is the time since the next file started (when it stopped being written),
so no file-system time is mixed with the clock. Files older than
``max_age_seconds`` go, and beyond ``max_files`` the oldest go. The current
file is never deleted; names that carry no stamp are left alone. :func:`choose` is the pure rule (names and
``now`` in, names out); :func:`prune` is the thin shell that lists the directory and deletes (through the file adapter,
:mod:`service.agent.tree_files`; a session tree asks its own store, files or rows).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

from service.agent.tree_files import FileLaneTree

DAY = 86_400.0
STAMP = "%Y%m%dT%H%M%S%fZ"  # the stamp that starts a session file's name
_STAMPED = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(\d{6})Z_")


@dataclass(frozen=True, kw_only=True)
class Retention:
    """How long and how many session files a lane keeps (``CLANKIE_SESSION_RETENTION_DAYS``, ``…_MAX_FILES``)."""

    max_age_seconds: float = 30 * DAY
    max_files: int = 50


def stamp_of(name: str) -> float | None:
    """The epoch seconds in a session file's name, or None if it has none."""
    match = _STAMPED.match(name)  # parsed by hand: strptime would import _strptime on the first turn
    if match is None:
        return None
    try:
        year, month, day, hour, minute, second, micro = (int(part) for part in match.groups())
        return dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None


def choose(names: list[str], current: str, now: float, retention: Retention) -> list[str]:
    """The names to delete; ``current`` (the live file) is always kept."""
    stamped = sorted((name, stamp) for name in names if (stamp := stamp_of(name)) is not None)
    doomed: set[str] = set()
    for index, (name, stamp) in enumerate(stamped):
        ended = stamped[index + 1][1] if index + 1 < len(stamped) else stamp
        if name != current and now - ended > retention.max_age_seconds:
            doomed.add(name)
    survivors = [name for name, _ in stamped if name not in doomed]
    excess = len(survivors) - retention.max_files
    for name in survivors:
        if excess <= 0:
            break
        if name != current:
            doomed.add(name)
            excess -= 1
    return sorted(doomed)


def prune(directory: Path, current: str, now: float, retention: Retention) -> list[str]:
    """Delete what :func:`choose` picks in ``directory``; returns the names deleted."""
    store = FileLaneTree(directory)
    return store.delete(choose(store.names(), current, now, retention))
