"""The port the spend ledger is kept behind: each UTC day's lines, appended as money is spent, read back at start (pure).

The ledger (:class:`service.captain.spend.ledger.Ledger`) keeps one line per answered model call (the budget keys it
counts against: the tree, the room, the person), per operator move (``raise``, ``reset``) and per budget notice. The
core decides what a line says and what a day's lines add up to; the port only keeps them, per day, in the order
they were appended. Two adapters pass one contract suite (``tests/clankie/store/test_contract_spend.py``): the file
adapter, today's ``<state>/captain/spend/<day>.jsonl`` (:mod:`service.captain.spend.ledger_files`), and the
PostgreSQL adapter (:mod:`clankie.store.spend_pg`), whose lines about a room are fenced by the lease epoch of the
shard the room is on.

Synchronous, as the ledger's callers are (a call is charged between two awaits).
"""

from __future__ import annotations

from typing import Any, Protocol

from clankie.store.ports import Shard

Record = dict[str, Any]
"""One ledger line, as JSON-able data."""


class SpendLedgerStore(Protocol):
    """Each UTC day's ledger lines."""

    def append(self, day: str, record: Record, shard: Shard | None) -> None:
        """One line of ``day`` (``YYYY-MM-DD``), kept before this returns. ``shard`` is the shard of the room the
        line is about (None: the tree's own, such as an operator's move). Raises OSError when it was not kept, or
        :class:`~clankie.store.ports.StaleEpoch` when this tree no longer holds ``shard``."""
        ...

    def lines(self, day: str) -> list[Record]:
        """Every readable line of ``day``, in the order they were appended ([] for a day with none)."""
        ...

    def days(self) -> list[str]:
        """The names of the days that have lines (a name that is not a date may appear: the caller skips it)."""
        ...

    def delete(self, day: str) -> None:
        """Forget ``day``'s lines (raises OSError when they could not be deleted)."""
        ...
