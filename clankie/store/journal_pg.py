"""The bridge's journal on PostgreSQL: each shard's lines, in write order, every write fenced by the shard's lease.

The PostgreSQL adapter of :class:`~clankie.store.journal_ports.JournalStore` (migration ``0006_bridge_journal.sql``).
A line is a row of ``clankie_journal_line``: the shard of its delivery's room, its ``op`` and delivery id (for an
operator's queries), the line itself as ``json`` (it round-trips exactly) and its size. A ``gap`` or ``caught_up``
line concerns every shard the bridge runs: it is written to each of them this tree holds (a shard it does not hold
is another tree's to read back), one transaction per shard.

Reads need no lease. A shard's lines are read when this tree takes the shard's lease (:meth:`read_shard`): the
shell folds them and the bridge drains the open deliveries, the ones a dead holder left. Every write runs in one
transaction that first checks the shard's lease (:class:`~clankie.store.leases.SyncFencing`): a tree that lost the
shard has its late lines refused, counted (:attr:`stale_writes`, ``clankie_stale_epoch_writes_total``) and not
written (:class:`~clankie.store.journal_ports.JournalRefused` ``stale_epoch``); a shard the tree does not hold is
refused before the database (``not_held``); a database that does not answer within the pool's wait is
``database_unavailable``. Compaction (:meth:`rewrite`) replaces, in one fenced transaction per shard, the lines of
each shard this tree holds and has read by the ones the shell keeps (open deliveries, and closed ones within the
retention without their text), so the table holds no more than the journal file would.

The adapter is synchronous, as the port is: each write is one round trip on the caller's thread (the bridge's loop).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import NoReturn

import psycopg
from psycopg.types.json import Json

from clankie.store.database import SyncPool
from clankie.store.journal_ports import JournalRefused, Line, StoredLine, StoredLines
from clankie.store.leases import FenceFor, NotHeld, StaleEpoch, SyncConnection, SyncFencing, shard_name
from clankie.store.ports import Shard

log = logging.getLogger(__name__)

UNAVAILABLE = (psycopg.OperationalError, OSError, TimeoutError)
"""What a database that does not answer (down, cut off, a pool wait that ran out) raises: not this tree's bug."""

INSERT_SQL = b"""
INSERT INTO clankie_journal_line (shard, op, delivery_id, line, bytes, written_epoch) VALUES (%s, %s, %s, %s, %s, %s)
"""


class PgJournalStore(SyncFencing):
    """The journal lines of the shards ``shards`` (``(id, count)``) one bridge runs, reached through ``pool``."""

    def __init__(self, pool: SyncPool, fence_for: FenceFor, shards: Sequence[Shard]) -> None:
        super().__init__(pool, fence_for)
        self.shards = [shard_name(*s) for s in shards]
        self._bytes: dict[str, int] = {}  # each shard's bytes as this tree last read or wrote them
        self._taken: set[str] = set()  # the shards whose lines this tree read since it took them: those it rewrites
        self.last_error: str | None = None

    @property
    def size(self) -> int:
        """Bytes of the lines of the shards this tree has taken (read at the take, counted as it writes)."""
        return sum(self._bytes.get(s, 0) for s in self._taken)

    def read(self) -> StoredLines:
        """Nothing is this tree's until it takes a shard's lease (:meth:`read_shard`)."""
        return StoredLines()

    def read_shard(self, shard: Shard) -> StoredLines:
        name = shard_name(*shard)
        try:
            with self.pool.connection() as conn:
                rows = conn.execute("SELECT id, line, bytes FROM clankie_journal_line WHERE shard = %s ORDER BY id",
                                    (name,)).fetchall()
        except UNAVAILABLE as exc:
            log.warning("journal: shard %s's lines not read (%s)", name, type(exc).__name__)
            raise JournalRefused("database_unavailable") from None
        self._taken.add(name)
        self._bytes[name] = sum(int(str(r[2])) for r in rows)
        return StoredLines(lines=[StoredLine(f"row {r[0]}", r[1]) for r in rows])

    def append(self, shard: Shard | None, lines: Sequence[Line]) -> None:
        if shard is not None:
            self._write(shard_name(*shard), lines)
            return
        refused: JournalRefused | None = None
        for name in self.shards:  # a line about every shard: each one this tree holds gets it
            if self.fence_for(name) is None:
                continue
            try:
                self._write(name, lines)
            except JournalRefused as exc:
                refused = refused or exc
        if refused is not None:
            raise refused

    def _write(self, name: str, lines: Sequence[Line]) -> None:
        encoded = [_encoded(line) for line in lines]
        try:
            with self.fenced(name) as (conn, epoch):
                _insert(conn, name, lines, encoded, epoch)
        except NotHeld:
            self._failed("not_held")
        except StaleEpoch:  # counted and logged by the fence
            self._failed("stale_epoch")
        except UNAVAILABLE as exc:
            log.warning("journal: a line for shard %s not written (%s)", name, type(exc).__name__)
            self._failed("database_unavailable")
        self.last_error = None
        self._bytes[name] = self._bytes.get(name, 0) + sum(len(e) for e in encoded)

    def _failed(self, code: str) -> NoReturn:
        self.last_error = code
        raise JournalRefused(code) from None

    def sync_soon(self) -> None:
        """Nothing to do: every line committed."""

    async def rewrite(self, lines: Sequence[tuple[Shard | None, Line]]) -> None:
        """Each shard this tree holds and has read: its lines replaced by ``lines``' for it (a gap line goes to each).
        A shard refused (lost meanwhile) or a database away keeps its lines: logged, the next compaction tries again.
        Runs without an await, so no line of this bridge can land between the delete and the inserts."""
        for name in self.shards:
            if name not in self._taken or self.fence_for(name) is None:
                continue
            kept = [line for shard, line in lines if shard is None or shard_name(*shard) == name]
            encoded = [_encoded(line) for line in kept]
            try:
                with self.fenced(name) as (conn, epoch):
                    conn.execute("DELETE FROM clankie_journal_line WHERE shard = %s", (name,))
                    _insert(conn, name, kept, encoded, epoch)
            except StaleEpoch:  # NotHeld too: the shard is no longer this tree's to compact
                continue
            except UNAVAILABLE as exc:
                log.warning("journal: shard %s not compacted (%s)", name, type(exc).__name__)
                continue
            self._bytes[name] = sum(len(e) for e in encoded)

    def close(self) -> None:
        """Nothing to do: every line committed, and the pool is the caller's."""


def _encoded(line: Line) -> bytes:
    return json.dumps(line, separators=(",", ":"), ensure_ascii=False).encode()


def _insert(conn: SyncConnection, name: str, lines: Sequence[Line], encoded: list[bytes], epoch: int) -> None:
    with conn.cursor() as cur:
        cur.executemany(INSERT_SQL, [(name, str(line.get("op", "")), _delivery(line), Json(line), len(data), epoch)
                                     for line, data in zip(lines, encoded, strict=True)])


def _delivery(line: Line) -> str | None:
    did = line.get("id")
    return did if isinstance(did, str) else None
