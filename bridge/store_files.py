"""The file adapters of the store's ports: today's dedupe memory and gateway session book, on this machine's disk.

:class:`FileDedupe` is :class:`bridge.dedupe.Dedupe` (the memory, unchanged) with its snapshot kept in one file
(0600, replaced whole): restored when opened, written at :meth:`FileDedupe.close`. :class:`FileGatewaySessions` is
the :class:`bridge.gateway_link.Book` that :class:`bridge.gateway_session.SessionKeeper` keeps, in the same file and
format (``<state>/bridge/gateway-session.json``), written whole at each change. They satisfy
:class:`clankie.store.ports.DedupeStore` and :class:`clankie.store.ports.GatewaySessionStore`, the contract the
PostgreSQL adapters pass too (``tests/clankie/store/test_contract_*.py``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from bridge.dedupe import Dedupe
from bridge.gateway_link import Book, Stored
from bridge.gateway_session import FILENAME, MAX_FILE_BYTES
from clankie.jsonl import replace_file
from clankie.paths import ensure_private_dir
from clankie.store.ports import SeenAs, SessionRecord, Shard

log = logging.getLogger(__name__)

DEDUPE_FILENAME = "dedupe.snapshot"


class FileDedupe:
    """The dedupe memory of this machine, its snapshot in ``<state>/bridge/dedupe.snapshot``."""

    def __init__(self, state_dir: Path, *, retention: float, horizon: float, bound: int) -> None:
        self.path = ensure_private_dir(state_dir / "bridge") / DEDUPE_FILENAME
        self.memory = Dedupe(retention=retention, horizon=horizon, bound=bound)
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        try:
            self.memory.restore(data)
        except ValueError as exc:
            log.warning("dedupe snapshot unreadable (%s); starting empty", exc)

    async def check(self, message_id: str, fingerprint: str, now: float) -> SeenAs:
        return self.memory.check(message_id, fingerprint, now).value  # the same three words: new, same, conflict

    async def add(self, message_id: str, fingerprint: str, expires: float) -> None:
        self.memory.add(message_id, fingerprint, expires)

    async def discard(self, message_id: str) -> None:
        self.memory.discard(message_id)

    async def prune(self, now: float) -> None:
        self.memory.prune(now)

    async def close(self) -> None:
        replace_file(self.path, self.memory.snapshot())


class FileGatewaySessions:
    """Each shard's gateway session in ``<state>/bridge/gateway-session.json``, the file the bridge keeps today."""

    def __init__(self, state_dir: Path) -> None:
        self.path = ensure_private_dir(state_dir / "bridge") / FILENAME
        self.book = self._read()

    def _read(self) -> Book:
        try:
            with self.path.open("rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return Book()
        try:
            if len(data) > MAX_FILE_BYTES:
                raise ValueError("too large")
            return Book.from_json(json.loads(data))
        except ValueError as exc:
            log.warning("gateway session file malformed (%s); starting a new session", type(exc).__name__)
            return Book()

    def _write(self) -> None:
        replace_file(self.path, json.dumps(self.book.to_json(), separators=(",", ":")).encode())

    async def load(self, shard: Shard) -> SessionRecord | None:
        kept = self.book.sessions.get(shard)
        return None if kept is None else SessionRecord(kept.session_id, kept.resume_url, kept.seq, kept.since)

    async def save(self, shard: Shard, record: SessionRecord) -> None:
        self.book.sessions[shard] = Stored(record.session_id, record.resume_url, record.seq, record.since)
        self._write()

    async def advance(self, shard: Shard, seq: int) -> None:
        kept = self.book.sessions.get(shard)
        if kept is not None and (kept.seq is None or seq > kept.seq):
            self.book.sessions[shard] = Stored(kept.session_id, kept.resume_url, seq, kept.since)
            self._write()

    async def forget(self, shard: Shard) -> None:
        if self.book.sessions.pop(shard, None) is not None:
            self._write()

    async def close(self) -> None:
        self._write()
