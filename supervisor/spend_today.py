"""The day's tokens for ``status``, read from the session trees once a line: the work of a call is what was written since the last.

``status`` carries the tokens every lane spent on the current UTC day
(:func:`clankie.spend.of_day` says what counts). Summing every tree on
every call made each call read the whole history (a 6,000-token window
starts a new tree every few turns: 284 trees, 7 MB, after 1,300 messages)
and the supervisor's resident memory followed the history it re-read
(issue 39). :class:`SpendToday` keeps, per lane directory, where it got to:
the newest tree counted whole (every tree of the lane named up to it is in
the lane's total) and how far into the live tree (a byte offset, whole
lines only). A call reads only the bytes written since, in chunks of at
most :data:`CHUNK` bytes, and streams the directories without listing
them whole, so neither the history nor a burst since the last call sets
its memory. What it holds is a few numbers per lane directory; a
directory that is gone is forgotten, and a new day starts from nothing.

Trees are named by their UTC start stamp (``YYYYMMDDT…``), so a tree whose
successor in its lane began before the day holds none of the day's entries
and is never opened (as :func:`service.captain.spend.ledger.from_trees`
reads them). A name with no stamp sorts after every stamp and is read.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from clankie import jsonl
from clankie.protocol import Tokens
from clankie.spend import TREE_DIRS, of_entries

CHUNK = 256 * 1024
"""Most bytes read from a tree at once (a line longer than this is read whole)."""


@dataclass
class _Lane:
    """How far one lane directory has been counted."""

    done: str = ""  # the newest tree counted whole: every tree of the lane named up to it is in `total`
    total: Tokens = field(default_factory=Tokens)
    live: str = ""  # the tree being counted, up to `offset` (whole lines)
    inode: int = 0
    offset: int = 0
    live_total: Tokens = field(default_factory=Tokens)

    def start(self, name: str) -> None:
        self.live, self.inode, self.offset, self.live_total = name, 0, 0, Tokens()

    def close_live(self) -> None:
        """The live tree has a successor: it is counted whole."""
        self.total = self.total + self.live_total
        self.done = self.live
        self.start("")


class SpendToday:
    """Every lane's tokens on one UTC day, counted incrementally (thread-safe: ``status`` reads in a worker thread)."""

    def __init__(self, captain_root: Path) -> None:
        self.root = str(captain_root)
        self.day = ""
        self._lanes: dict[str, _Lane] = {}
        self._lock = threading.Lock()

    @property
    def lanes(self) -> int:
        """Lane directories held (one small record each)."""
        return len(self._lanes)

    def of_day(self, day: str) -> Tokens:
        """The tokens spent on ``day`` (``YYYY-MM-DD`` UTC) in every tree under the captain's root."""
        with self._lock:
            if day != self.day:
                self.day, self._lanes = day, {}
            seen: set[str] = set()
            total = Tokens()
            for name in TREE_DIRS:
                for directory in _tree_dirs(os.path.join(self.root, name)):
                    lane = self._lanes.get(directory)
                    if lane is None:
                        lane = self._lanes[directory] = _Lane()
                    seen.add(directory)
                    total = total + self._count(directory, lane, day)
            for gone in self._lanes.keys() - seen:
                del self._lanes[gone]
            return total

    def _count(self, directory: str, lane: _Lane, day: str) -> Tokens:
        for name in _unread(directory, lane.done, day.replace("-", "")):
            if lane.live and name != lane.live:  # a newer tree: the live one is finished
                _read(os.path.join(directory, lane.live), lane, day)
                lane.close_live()
            if not lane.live:
                lane.start(name)
            _read(os.path.join(directory, name), lane, day)
        return lane.total + lane.live_total


def _tree_dirs(top: str) -> list[str]:
    """The directories under ``top`` (itself included) that may hold trees (few: one per lane).

    Plain strings, never :class:`pathlib.Path`: a Path interns each part of its name, and a scan that made one per
    entry would churn the interpreter's table of interned strings (its resizes are memory the scan leaves behind).
    """
    out: list[str] = []
    stack = [top]
    while stack:
        here = stack.pop()
        try:
            with os.scandir(here) as it:
                has_trees = False
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.name.endswith(".jsonl"):
                        has_trees = True
        except OSError:
            continue
        if has_trees:
            out.append(here)
    return out


def _unread(directory: str, done: str, stamp: str) -> list[str]:
    """The lane's trees after ``done`` that may hold the day's entries, in name (start) order.

    Streamed: only the names kept are held, never the directory's listing.
    Of the trees begun before the day only the newest is kept (it may have
    gone on into the day); the older ones ended before the day began.
    """
    keep: list[str] = []
    newest_before = ""
    try:
        with os.scandir(directory) as it:
            for entry in it:
                name = entry.name
                if not name.endswith(".jsonl") or name <= done or not entry.is_file(follow_symlinks=False):
                    continue
                if name[:8] < stamp:
                    newest_before = max(newest_before, name)
                else:
                    keep.append(name)
    except OSError:
        return []
    if newest_before:
        keep.append(newest_before)
    return sorted(keep)


def _read(path: str, lane: _Lane, day: str) -> None:
    """Count the whole lines of the lane's live tree written since its offset (from the start if it was replaced)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if st.st_ino != lane.inode or st.st_size < lane.offset:  # new, or rewritten: count it again
            lane.inode, lane.offset, lane.live_total = st.st_ino, 0, Tokens()
        os.lseek(fd, lane.offset, os.SEEK_SET)
        carry = b""
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                break
            data = carry + chunk
            cut = data.rfind(b"\n") + 1
            if cut:
                lane.live_total = lane.live_total + of_entries(jsonl.parse_lines(data[:cut]), day)
                lane.offset += cut
            carry = data[cut:]
    except OSError:
        return
    finally:
        os.close(fd)
