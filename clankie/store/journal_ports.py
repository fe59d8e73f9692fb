"""The port the bridge's ingress journal is kept behind: its lines, appended as deliveries move, read back (pure).

The journal (:mod:`bridge.journal`) writes one JSON object per event (``admit``, ``buffer``, ``wait``, ``close``,
``gap``, ``caught_up``; ``closed`` after a compaction) and folds them into its state; the port only stores lines and
hands them back in write order, raw (the shell parses each once, so a malformed line costs only itself). Two
adapters pass one contract suite (``tests/clankie/store/test_contract_journal.py``):

- the file adapter, today's ``<state>/bridge/journal.jsonl`` on this machine's disk (:mod:`bridge.journal_files`):
  every line is this tree's, read whole at open;
- the PostgreSQL adapter (:mod:`clankie.store.journal_pg`): the lines of each shard (the shard of the delivery's
  room, :func:`clankie.shards.room_shard`), every write fenced by that shard's lease. A shard's lines become this
  tree's when it takes the shard's lease, so they are read then (:meth:`JournalStore.read_shard`), not at open: that
  is how a tree that takes a dead tree's shard drains the dead tree's open deliveries.

A line about a delivery names its shard; a ``gap`` or ``caught_up`` line (``shard`` None) concerns every shard the
bridge runs, and the PostgreSQL adapter writes it to each of those it holds (the bridge's gateway opens and closes as
one, so a gap is every shard's).

Synchronous, as the journal's callers are (a line is written before a submission goes out); the PostgreSQL adapter
holds the caller's loop for one round trip per write, as the lanes' adapter does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from clankie.errors import ClankieError
from clankie.store.ports import Shard

Line = dict[str, object]
"""One journal line as JSON-able data (:mod:`bridge.journal_lines` types each kind)."""


@dataclass(frozen=True, slots=True)
class StoredLine:
    """One line as read back: where it was (``line 12`` of the file, ``row 345`` of the table: for the log of a line
    that is skipped) and its decoded JSON, not yet parsed. ``torn``: the file's last line, cut short by a crash and
    whole but for its newline; skipped without a word if it does not parse."""

    where: str
    raw: object
    torn: bool = False


@dataclass(slots=True)
class StoredLines:
    """What a read found: the lines in write order, and the ones that are not even JSON (``line 3: not JSON``)."""

    lines: list[StoredLine] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


class JournalRefused(ClankieError):
    """Raised when the store refused a write (nothing was written) or a read; ``code`` says why in a word for logs
    and receipts: ``stale_epoch`` (another tree holds the shard now: the lease is gone), ``not_held`` (the shard is
    not this tree's), ``database_unavailable`` (the database did not answer in time). The file adapter raises
    :class:`clankie.appender.DiskError` instead, as it always has."""

    def __init__(self, code: str) -> None:
        self.code = code
        super().__init__(code)


LEASE_GONE = frozenset({"stale_epoch", "not_held"})
"""The refusals that mean the shard is not this tree's any more: what it could not write is the taker's to drain
(a delivery refused so fails here without a sign in the room, and holds nothing back)."""


class JournalStore(Protocol):
    """The journal's lines."""

    @property
    def size(self) -> int:
        """Bytes the store holds for this tree now (the bound ``CLANKIE_DISCORD_JOURNAL_MAX_BYTES`` is checked on)."""
        ...

    @property
    def last_error(self) -> str | None:
        """The last write failure's code while it lasts (for the status line), else None."""
        ...

    def read(self) -> StoredLines:
        """The lines that are this tree's at open (the file: all of them; the database: none until a lease is taken)."""
        ...

    def read_shard(self, shard: Shard) -> StoredLines:
        """``shard``'s lines, read when this tree takes its lease (the file: none, every line was read at open)."""
        ...

    def append(self, shard: Shard | None, lines: Sequence[Line]) -> None:
        """Write ``lines`` at the end, all or none; ``shard`` None: a line about every shard the bridge runs. Raises
        :class:`JournalRefused` (or the file's DiskError) when nothing was written."""
        ...

    def sync_soon(self) -> None:
        """Make what was appended durable soon (the database: already committed)."""
        ...

    async def rewrite(self, lines: Sequence[tuple[Shard | None, Line]]) -> None:
        """Compaction: replace what the store holds for this tree by ``lines`` (each with its shard, in order). The
        database rewrites only the shards this tree holds now."""
        ...

    def close(self) -> None:
        """Let go of the store (the file's descriptor; the database's pool is the caller's)."""
        ...

