"""Size-based rotation for append-only JSONL files, with a total cap.

A file ``name.jsonl`` that reaches ``rotate_bytes`` is renamed to the next
numbered segment ``name.jsonl.000001``, ``name.jsonl.000002``, … and a new
``name.jsonl`` is started. Its writer rotates only between two whole lines,
on the thread that wrote the last one and under the lock it writes with, so
no line is ever split across segments or lost: a descriptor still open on
the renamed file keeps pointing at the segment, and the next line goes to
the new file. A crash between the rename and the new file costs nothing
either (the next append creates it).

After each rotation the cap is applied: while the files the cap covers
(the live file and its segments, or with ``shared`` every ``*.jsonl`` file
and segment in the directory, as for one lane log per room) hold more than
``keep_bytes - rotate_bytes`` (room for the new live file to fill), the
oldest segment is unlinked. So the files hold at most ``keep_bytes`` plus one
line; live files are never unlinked, so under a shared cap the bound is the
live files' own size if that is larger. :func:`plan_deletions` is the pure rule; the rest is the shell.

Readers that need every line (:func:`read_all`) read the segments oldest
first, then the live file; :func:`read_tail` stops as soon as it has enough.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clankie.jsonl import read_lines

log = logging.getLogger(__name__)

_SEGMENT = re.compile(r"(?P<base>.+\.jsonl)\.(?P<n>\d{1,12})")


@dataclass(frozen=True, slots=True)
class Rotation:
    """When to rotate (``rotate_bytes``) and how much to keep in all (``keep_bytes``)."""

    rotate_bytes: int
    keep_bytes: int
    shared: bool = False  # the cap covers every JSONL file of the directory, not just this file's segments

    def __post_init__(self) -> None:
        if self.rotate_bytes <= 0 or self.keep_bytes < self.rotate_bytes:
            raise ValueError("a rotation needs rotate_bytes > 0 and keep_bytes >= rotate_bytes")


@dataclass(frozen=True, slots=True)
class Found:
    """One file under a cap: its path, size, age and whether it is a segment (only those may go)."""

    path: Path
    size: int
    mtime_ns: int
    number: int  # the segment's number; 0 for a live file
    segment: bool


def plan_deletions(files: Sequence[Found], keep_bytes: int) -> list[Path]:
    """The segments to unlink, oldest first, so the files left hold at most ``keep_bytes`` (if segments allow)."""
    total = sum(f.size for f in files)
    out: list[Path] = []
    for f in sorted((f for f in files if f.segment), key=lambda f: (f.mtime_ns, f.number, f.path.name)):
        if total <= keep_bytes:
            break
        out.append(f.path)
        total -= f.size
    return out


# ------------------------------------------------------------------ the shell


def segment_of(path: Path, number: int) -> Path:
    return path.with_name(f"{path.name}.{number:06d}")


def segments(path: Path) -> list[Path]:
    """``path``'s segments, oldest first."""
    found: list[tuple[int, Path]] = []
    try:
        names = os.listdir(path.parent)
    except FileNotFoundError:
        return []
    for name in names:
        m = _SEGMENT.fullmatch(name)
        if m is not None and m.group("base") == path.name:
            found.append((int(m.group("n")), path.parent / name))
    return [p for _, p in sorted(found)]


def rotate(path: Path, rotation: Rotation) -> Path | None:
    """Rename ``path`` to its next segment and apply the cap; returns the segment (None if the rename failed).

    The caller holds the writer's lock and has just written a whole line.
    """
    existing = segments(path)
    number = 1
    if existing:
        m = _SEGMENT.fullmatch(existing[-1].name)
        number = int(m.group("n")) + 1 if m is not None else len(existing) + 1
    segment = segment_of(path, number)
    try:
        os.rename(path, segment)
    except OSError as exc:
        log.error("cannot rotate %s: %s; it goes on growing", path.name, exc.strerror)
        return None
    enforce_cap(path, rotation)
    return segment


def enforce_cap(path: Path, rotation: Rotation) -> int:
    """Unlink the oldest segments under ``path``'s cap until the total fits; returns how many went."""
    files = _covered(path, rotation.shared)
    gone = 0
    for victim in plan_deletions(files, rotation.keep_bytes - rotation.rotate_bytes):  # room for the new live file
        try:
            victim.unlink()
            gone += 1
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("cannot remove old segment %s: %s", victim.name, exc.strerror)
    return gone


def _covered(path: Path, shared: bool) -> list[Found]:
    out: list[Found] = []
    with os.scandir(path.parent) as entries:
        for entry in entries:
            m = _SEGMENT.fullmatch(entry.name)
            if m is not None:
                if not shared and m.group("base") != path.name:
                    continue
                number, segment = int(m.group("n")), True
            elif entry.name == path.name or (shared and entry.name.endswith(".jsonl")):
                number, segment = 0, False
            else:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            out.append(Found(Path(entry.path), st.st_size, st.st_mtime_ns, number, segment))
    return out


def read_all(path: Path) -> list[dict[str, Any]]:
    """Every complete line of ``path`` and its segments, oldest first (a torn or garbled line is skipped)."""
    out: list[dict[str, Any]] = []
    for segment in segments(path):
        out.extend(read_lines(segment))
    out.extend(read_lines(path))
    return out


def read_tail(path: Path, n: int) -> list[dict[str, Any]]:
    """The last ``n`` complete lines of ``path`` and its segments, oldest first; reads no more segments than needed."""
    out = read_lines(path)
    for segment in reversed(segments(path)):
        if len(out) >= n:
            break
        out = read_lines(segment) + out
    return out[-n:] if n > 0 else []
