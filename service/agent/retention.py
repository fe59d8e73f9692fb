"""Which old session files of one lane to delete: by age and by count (pure choice, thin shell).

A lane's directory holds its session files, newest last by their timestamped
names: the current one plus the ones it continued at each compaction (and
files moved aside as ``.broken``). Files older than ``max_age_seconds`` (by
modification time: when they stopped being written) go, and beyond
``max_files`` the oldest go. The newest session file is never deleted.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

DAY = 86_400.0
KINDS = (".jsonl", ".broken", ".partial")  # every name a lane directory's session files may carry


@dataclass(frozen=True, kw_only=True)
class Retention:
    """How long and how many session files a lane keeps (``CLANKIE_SESSION_RETENTION_DAYS``, ``…_MAX_FILES``)."""

    max_age_seconds: float = 30 * DAY
    max_files: int = 50


def choose(files: list[tuple[str, float]], current: str, now: float, retention: Retention) -> list[str]:
    """The names to delete among ``(name, mtime)``; ``current`` (the live file) is always kept."""
    ordered = sorted(files)
    doomed = {name for name, mtime in ordered if name != current and now - mtime > retention.max_age_seconds}
    survivors = [name for name, _ in ordered if name not in doomed]
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
    files: list[tuple[str, float]] = []
    try:
        with os.scandir(directory) as it:
            for item in it:
                if item.name.endswith(KINDS) and item.is_file(follow_symlinks=False):
                    files.append((item.name, item.stat(follow_symlinks=False).st_mtime))
    except OSError as exc:
        log.warning("session retention: cannot list %s: %s", directory, exc.strerror)
        return []
    deleted: list[str] = []
    for name in choose(files, current, now, retention):
        try:
            (directory / name).unlink()
        except OSError as exc:
            log.warning("session retention: cannot delete %s: %s", name, exc.strerror)
            continue
        deleted.append(name)
    if deleted:
        log.info("session retention: deleted %d old session files in %s", len(deleted), directory.name)
    return deleted
