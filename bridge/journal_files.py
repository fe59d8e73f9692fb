"""The file adapter of the journal's lines: ``<state>/bridge/journal.jsonl`` on this machine's disk, today's format.

It satisfies :class:`clankie.store.journal_ports.JournalStore` (the contract the PostgreSQL adapter passes too,
``tests/clankie/store/test_contract_journal.py``). The file (0600, in a 0700 directory) is read whole once, before
it is opened for appending (a torn last line, a crash mid-write, is then ended so the next line starts fresh); each
line is appended through :class:`clankie.appender.Appender` (in the kernel when the call returns, synced soon after);
compaction writes the lines kept to a new file, carries over what was appended meanwhile, and renames it in. A line
the disk refuses raises :class:`clankie.appender.DiskError`. One machine's file is one tree's: shards play no part.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from clankie.appender import Appender
from clankie.store.journal_ports import Line, StoredLine, StoredLines
from clankie.store.ports import Shard


class FileJournalStore:
    """The lines of ``path``, read at construction, appended through one :class:`Appender`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._read = decode(_read(path))  # before the appender ends a torn last line
        self._appender = Appender(path)

    @property
    def size(self) -> int:
        return self._appender.size

    @property
    def last_error(self) -> str | None:
        return self._appender.last_error

    def read(self) -> StoredLines:
        found, self._read = self._read, StoredLines()
        return found

    def read_shard(self, shard: Shard) -> StoredLines:
        """Nothing: every line was read at open."""
        return StoredLines()

    def append(self, shard: Shard | None, lines: Sequence[Line]) -> None:
        self._appender.append(*lines)

    def sync_soon(self) -> None:
        self._appender.sync_soon()

    async def rewrite(self, lines: Sequence[tuple[Shard | None, Line]]) -> None:
        await self._appender.rewrite(line for _, line in lines)

    def close(self) -> None:
        self._appender.close()


def decode(data: bytes) -> StoredLines:
    """A journal file's bytes as decoded lines, numbered from 1; a row that is not JSON is reported and skipped,
    never the rest. A last row without its newline is a write a crash cut short: kept if whole, marked ``torn``."""
    out = StoredLines()
    rows = data.split(b"\n")
    torn = rows.pop() if rows else b""  # what follows the last newline: empty, or a torn write
    for lineno, row in enumerate(rows, start=1):
        if not row.strip():
            continue
        try:
            out.lines.append(StoredLine(f"line {lineno}", json.loads(row)))
        except (json.JSONDecodeError, UnicodeDecodeError):
            out.unreadable.append(f"line {lineno}: not JSON")
    if torn.strip():
        try:
            out.lines.append(StoredLine(f"line {len(rows) + 1}", json.loads(torn), torn=True))
        except (json.JSONDecodeError, UnicodeDecodeError):
            pass
    return out


def _read(path: Path) -> bytes:
    """The journal file's bytes (none before the first line is written)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""
