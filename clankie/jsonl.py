"""Append-only JSONL, written the one way every process writes it.

A record is one line, handed to the kernel whole: a short write is carried
on until the line is complete, and a write that makes no progress raises.
Readers skip a torn last line, so a crash costs at most the line being
written, never a complete one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def encode_line(record: Mapping[str, object]) -> bytes:
    """One record as one compact UTF-8 JSON line."""
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data``, continuing after short writes; raise ``OSError`` if that is impossible."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "write made no progress")
        view = view[written:]


def replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole: a new private file beside it (0600, no symlink followed), synced, then
    renamed over it; if anything fails the new file is removed and ``path`` is as it was. Raises ``OSError``.
    Making the rename itself durable (a sync of the directory) is the caller's choice of now or later. One writer
    per path: the new file's name is fixed, so one left by a crash is overwritten by the next write, not kept."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


# -- issue 14 (full disk): a failed append leaves no torn line --------------------------------------


def append_all(fd: int, data: bytes) -> int:
    """:func:`write_all` to an append-only file; if it fails part-way (``ENOSPC``), cut the file back.

    The file is truncated to the length it had before this call, so a full
    disk costs the whole line being written and never leaves half of it.
    Returns the file's length after the write as this writer knows it (a
    second writer appending at the same moment could have made it longer).
    """
    start = os.fstat(fd).st_size
    try:
        write_all(fd, data)
    except OSError:
        try:
            os.ftruncate(fd, start)
        except OSError:
            pass  # readers still skip a torn last line
        raise
    return start + len(data)


def read_lines(path: Path) -> list[dict[str, Any]]:
    """Every complete, readable line; a torn or garbled line is skipped."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    return parse_lines(raw)


def parse_lines(data: bytes) -> list[dict[str, Any]]:
    """The readable JSON objects among the lines of ``data``; a blank, torn or garbled line is skipped."""
    out: list[dict[str, Any]] = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out
