"""Durable session trees: one append-only JSONL file per session.

Line 1 is a header (``type: "session"``); every later line is an entry with
``id``, ``parent_id``, ``type`` and an ISO ``timestamp``. Entry types:

``message``       a conversation message (``message``), assistant ones with ``usage``/``stop_reason``
``model_change``  the model used from here on (``model``)
``compaction``    ``summary``, ``first_kept_id``, ``tokens_before``
``custom``        runtime records (``custom_type``, ``data``): run ends, provider errors

Each line is written whole (``O_APPEND``; a short write is continued, a failed
one raises ``OSError`` and the next line starts on a fresh line); :meth:`sync`
hands the fsync to the sync threads (:mod:`clankie.appender`), and the agent
calls it at turn boundaries: a crash of the process cannot lose a line that
was written, and the event loop never waits on the disk. On load a torn last line
(a crash mid-append) is cut off with a warning; every complete line is kept,
except lines that are not entries (no ``id`` or ``type``), skipped with a warning.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from clankie.appender import sync_fd_later
from clankie.clock import Clock
from clankie.errors import ClankieError
from clankie.jsonl import append_all, encode_line, write_all
from clankie.paths import make_private_dirs

from service.agent.content import Message
from service.agent.transcript import Entry, context_messages

log = logging.getLogger(__name__)

VERSION = 1
SUFFIX = ".jsonl"


class SessionCorrupt(ClankieError):
    """Raised when a session file has no readable header: it is not a session tree."""


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="milliseconds")


class SessionTree:
    """One session file: its entries in memory, appended to disk line by line."""

    def __init__(self, path: Path, header: dict[str, Any], entries: list[Entry], clock: Clock) -> None:
        self.path = path
        self.header = header
        self._entries = entries
        self._by_id = {e["id"]: e for e in entries}
        self._clock = clock
        self._leaf: str | None = entries[-1]["id"] if entries else None
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        self._torn = False  # a failed write may have left half a line at the end of the file

    # -- opening -------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, clock: Clock) -> SessionTree:
        """Start a new, empty session tree in ``directory``."""
        make_private_dirs(directory)
        now = clock.wall()
        session_id = uuid.uuid4().hex
        stamp = dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
        path = directory / f"{stamp}_{session_id[:8]}{SUFFIX}"
        header = {"type": "session", "version": VERSION, "id": session_id, "timestamp": _iso(now)}
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            write_all(fd, encode_line(header))
            sync_fd_later(fd)
        finally:
            os.close(fd)
        log.info("created session %s", path.name)
        return cls(path, header, [], clock)

    @classmethod
    def open(cls, path: Path, clock: Clock) -> SessionTree:
        """Load an existing session file, cutting off a torn last line."""
        header, entries = _load(path)
        return cls(path, header, entries, clock)

    @classmethod
    def open_latest(cls, directory: Path, clock: Clock) -> SessionTree:
        """Resume the most recent session tree in ``directory``, or create one."""
        latest = latest_session(directory)
        if latest is None:
            return cls.create(directory, clock)
        return cls.open(latest, clock)

    def close(self) -> None:
        """Close the file (its last fsync runs on the sync threads); the tree is read-only afterwards."""
        if self._fd >= 0:
            sync_fd_later(self._fd)
            os.close(self._fd)
            self._fd = -1

    # -- reading -------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return str(self.header["id"])

    @property
    def leaf_id(self) -> str | None:
        return self._leaf

    @property
    def entries(self) -> list[Entry]:
        """Every entry in file order (a copy of the list; entries are shared)."""
        return list(self._entries)

    def get(self, entry_id: str) -> Entry:
        return self._by_id[entry_id]

    def path_to_leaf(self) -> list[Entry]:
        """Entries from the root to the current leaf, following ``parent_id``."""
        out: list[Entry] = []
        current = self._leaf
        while current is not None:
            entry = self._by_id.get(current)
            if entry is None:  # its line was unreadable: the path starts after it
                break
            out.append(entry)
            current = entry.get("parent_id")
        out.reverse()
        return out

    def messages(self) -> list[Message]:
        """The conversation as the model should see it (compaction applied, pairing repaired)."""
        return context_messages(self.path_to_leaf())

    def last_model(self) -> str | None:
        for entry in reversed(self.path_to_leaf()):
            if entry["type"] == "model_change":
                return str(entry["model"])
        return None

    # -- appending -----------------------------------------------------------

    def append(self, entry_type: str, **fields: Any) -> Entry:
        """Append one entry as a child of the leaf; it becomes the new leaf."""
        if self._fd < 0:
            raise ValueError("session tree is closed")
        entry_id = self._new_id()
        entry: Entry = {
            "type": entry_type,
            "id": entry_id,
            "parent_id": self._leaf,
            "timestamp": _iso(self._clock.wall()),
            **fields,
        }
        line = encode_line(entry)
        try:
            append_all(self._fd, b"\n" + line if self._torn else line)
        except OSError:
            self._torn = True  # the next line starts fresh; this half one is skipped on load
            raise
        self._torn = False
        self._entries.append(entry)
        self._by_id[entry_id] = entry
        self._leaf = entry_id
        return entry

    def append_message(self, message: Message, **extra: Any) -> Entry:
        return self.append("message", message=message, **extra)

    def append_model_change(self, model: str) -> Entry:
        return self.append("model_change", model=model)

    def append_compaction(self, summary: str, first_kept_id: str, tokens_before: int) -> Entry:
        return self.append(
            "compaction", summary=summary, first_kept_id=first_kept_id, tokens_before=tokens_before
        )

    def append_custom(self, custom_type: str, data: dict[str, Any]) -> Entry:
        return self.append("custom", custom_type=custom_type, data=data)

    def sync(self) -> None:
        """Make every appended line durable soon, off the event loop (called at turn boundaries)."""
        if self._fd >= 0:
            sync_fd_later(self._fd)

    def _new_id(self) -> str:
        while True:
            candidate = secrets.token_hex(4)
            if candidate not in self._by_id:
                return candidate


def latest_session(directory: Path) -> Path | None:
    """The newest session file in ``directory`` by its timestamped name, if any."""
    if not directory.is_dir():
        return None
    files = sorted(p for p in directory.iterdir() if p.suffix == SUFFIX and p.is_file())
    return files[-1] if files else None


def _load(path: Path) -> tuple[dict[str, Any], list[Entry]]:
    data = path.read_bytes()
    complete_end = data.rfind(b"\n") + 1
    if complete_end < len(data):
        log.warning(
            "session %s: dropping a torn last line (%d bytes)", path.name, len(data) - complete_end
        )
        with path.open("r+b") as f:
            f.truncate(complete_end)
            os.fsync(f.fileno())
    lines = list(_parse(path, data[:complete_end]))
    if not lines or lines[0].get("type") != "session":
        raise SessionCorrupt(f"{path.name} has no session header")
    entries = [e for e in lines[1:] if isinstance(e.get("id"), str) and isinstance(e.get("type"), str)]
    if len(entries) < len(lines) - 1:
        log.warning("session %s: skipping %d lines without an id or type", path.name, len(lines) - 1 - len(entries))
    return lines[0], entries


def _parse(path: Path, data: bytes) -> Iterator[dict[str, Any]]:
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            log.warning("session %s: skipping unreadable line %d", path.name, number)
            continue
        if isinstance(obj, dict):
            yield obj
