"""Every lane the captain has, live in memory or only on disk, newest activity first, bounded.

``clankiectl lanes`` shows the live lanes (:mod:`service.captain.lanes.reports`)
and, after them, the lanes that exist only as session trees on disk: evicted
(idle, least recently used) or left by an earlier process. A disk lane's row
says whether it would come back warm (an eviction stamp of this process, see
:mod:`service.captain.lanes.registry`) and how long ago its session files were last
written. The directories are scanned when asked (``os.scandir``, one ``stat``
per session file); at most ``limit`` rows are returned in all
(``CLANKIE_LANES_LIST_MAX``), the most recently active first. One-shot trees
(``turns/``) are not lanes and are not listed. :func:`disk_lanes_by_hash`
finds a lane by the hash traces and journald carry (``LANE=``,
``gen_ai.conversation.id``) among every directory, past that bound: names
are hashed, only the matches are read.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from clankie.journald import lane_hash
from service.captain.lanes.keys import CaptainPaths
from service.captain.lanes.registry import WARM_STAMP


@dataclass(frozen=True, slots=True)
class DiskLane:
    """A lane's directory on disk: its key, when its session files were last written, and its warm stamp."""

    key: str
    directory: Path
    last_write: float  # wall-clock seconds
    stamp: str | None  # the instance id in its warm stamp, if any


def _scan(directory: Path) -> DiskLane | None:
    newest, stamp = 0.0, None
    try:
        with os.scandir(directory) as found:
            for item in found:
                if item.name == WARM_STAMP:
                    try:
                        stamp = Path(item.path).read_text()
                    except OSError:
                        stamp = None
                elif item.name.endswith(".jsonl"):
                    try:
                        newest = max(newest, item.stat().st_mtime)
                    except OSError:
                        continue
    except OSError:
        return None
    return DiskLane(unquote(directory.name), directory, newest, stamp)


def _lane_dirs(paths: CaptainPaths) -> list[Path]:
    out: list[Path] = []
    for parent in (paths.root / "rooms", paths.root / "system"):
        try:
            with os.scandir(parent) as found:
                out.extend(Path(item.path) for item in found if item.is_dir(follow_symlinks=False))
        except OSError:  # no lane of this kind yet
            continue
    return out


def disk_lanes_by_hash(paths: CaptainPaths, skip: Iterable[str], prefix: str, limit: int) -> list[DiskLane]:
    """Up to ``limit`` lanes on disk (not in ``skip``) whose :func:`~clankie.journald.lane_hash` starts with ``prefix``."""
    skipped = set(skip)
    out: list[DiskLane] = []
    for directory in _lane_dirs(paths):
        key = unquote(directory.name)
        if key in skipped or not lane_hash(key).startswith(prefix):
            continue
        lane = _scan(directory)
        if lane is not None:
            out.append(lane)
        if len(out) >= limit:
            break
    out.sort(key=lambda lane: lane.last_write, reverse=True)
    return out


def disk_lanes(paths: CaptainPaths, skip: Iterable[str], limit: int) -> list[DiskLane]:
    """Up to ``limit`` lanes with a directory under ``rooms/`` or ``system/`` and no key in ``skip``, newest first."""
    if limit <= 0:
        return []
    skipped = set(skip)
    out: list[DiskLane] = []
    for directory in _lane_dirs(paths):
        if unquote(directory.name) in skipped:
            continue
        lane = _scan(directory)
        if lane is not None:
            out.append(lane)
    out.sort(key=lambda lane: lane.last_write, reverse=True)
    return out[:limit]


def count_disk_lanes(paths: CaptainPaths, live: Iterable[str]) -> int:
    """How many lanes have a directory under ``rooms/`` or ``system/`` and are not in ``live`` (names only: no stat)."""
    keys = {unquote(directory.name) for directory in _lane_dirs(paths)}
    return len(keys.difference(live))
