"""The port a lane's session tree is kept behind: one lane's segments, read at lane start, appended during a run (pure).

A lane's durable memory (:class:`service.agent.session.SessionTree`) is a chain of *segments*: the current one and
the ones it continued at each compaction. A segment is a header record followed by entry records, in write order;
its name starts with the UTC stamp of when it began (``<stamp>Z_<id8>.jsonl``), so names sort by age. The tree's
logic (the live branch, compaction, the cut of a dead run, which old segments retention deletes) stays in the
core; the port only stores and returns records. Two adapters pass one contract suite
(``tests/clankie/store/test_contract_lanes.py``): the file adapter, today's files under
``<state>/captain/rooms/<quoted key>/`` (:mod:`service.agent.tree_files`), and the PostgreSQL adapter, whose every
write is fenced by the lease epoch of the shard the lane's room is on (:mod:`clankie.store.lanes_pg`).

The port is synchronous, as the tree's callers are (an append happens between two awaits of a run); the
PostgreSQL adapter therefore holds the event loop for one round trip per write (docs/multi-machine.md).
"""

from __future__ import annotations

from typing import Any, Protocol

Record = dict[str, Any]
"""One header or entry, as JSON-able data."""

SEGMENT_SUFFIX = ".jsonl"
"""The suffix of a segment that may be current (one set aside as unreadable ends ``.broken``)."""


class LaneTreeStore(Protocol):
    """One lane's segments."""

    @property
    def label(self) -> str:
        """What logs call the lane's place (a directory's name, a lane key); never message content."""
        ...

    def names(self) -> list[str]:
        """Every segment's name (set-aside ones too), for retention; an unreadable store gives []."""
        ...

    def newest(self) -> str | None:
        """The newest segment that may be current (by name), or None when the lane has none."""
        ...

    def read(self, name: str) -> list[Record]:
        """Segment ``name``'s records: its header first, then its entries in write order. Raises
        :class:`TreeUnreadable` when it has no readable header."""
        ...

    def set_aside(self, name: str) -> str:
        """Keep an unreadable segment under another name that is never current; returns that name."""
        ...

    def create(self, name: str, header: Record) -> None:
        """A new segment holding only ``header``; ``name`` must not exist."""
        ...

    def append(self, name: str, entry: Record) -> None:
        """One entry at the end of segment ``name`` (raises OSError, or the adapter's refusal, when not written)."""
        ...

    def write_whole(self, name: str, records: list[Record]) -> None:
        """A new segment holding ``records`` (header first), written all or nothing."""
        ...

    def delete(self, names: list[str]) -> list[str]:
        """Delete these segments (never the current one: the caller's rule); returns the names deleted."""
        ...

    def sync(self, name: str) -> None:
        """Make what was appended to ``name`` durable soon (a turn boundary)."""
        ...


class TreeUnreadable(Exception):
    """Raised by :meth:`LaneTreeStore.read` for a segment without a readable header (the store's data is bad)."""
