"""The port the service's delivery records are kept behind: each delivery's current record, by its id (pure).

The service answers each delivery id exactly once (:mod:`service.captain.deliveries.store`): it records a delivery
when it accepts it, names the run it joins, and keeps its result when it settles, so that a re-submission of the same
id and body gets that result instead of a second turn, and a delivery the service crashed in is charged honestly.
The shell decides what a record says; the port keeps each delivery's whole current record (:class:`Retained`), finds
it again, and holds the bounds: settled records go once older than the retention (never an unsettled one by age),
and past ``max_retained`` records the oldest settled go first, then the oldest unsettled ones not in ``keep``.

Two adapters pass one contract suite (``tests/clankie/store/test_contract_deliveries.py``): the file adapter, today's
append-only log under ``<state>/captain/deliveries/`` (:mod:`service.captain.deliveries.delivery_log`), and the
PostgreSQL adapter (:mod:`clankie.store.deliveries_pg`), a row per delivery that every tree of the profile reads, each
write fenced by the lease of the shard the delivery's room is on. With the records in the database, a delivery one
tree's service settled is answered from its record by the tree that takes the shard over, never run again.

Synchronous, as the shell's callers are (a record is written between two awaits of a submission).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from clankie.errors import ClankieError
from clankie.protocol import TurnResult
from clankie.store.ports import Shard


@dataclass(frozen=True, slots=True)
class Retained:
    """What the store remembers about one delivery.

    ``run`` is the run it joined in the process that accepted it, until that
    run ends (None: it never joined one, or the run ended), and ``tree`` the
    supervised tree that process belonged to (None: no supervisor, or a record
    from before trees were named). ``crashed_runs`` are the runs it was part of
    that died in a crash of the service, oldest first.
    """

    delivery_id: str
    fingerprint: str
    accepted_at: float
    result: TurnResult | None
    run: str | None = None
    crashed_runs: tuple[str, ...] = ()
    tree: str | None = None

    def crashed_so_far(self, tree: str | None) -> tuple[str, ...]:
        """``crashed_runs``, plus the run it still names if that run was in ``tree`` (the reading process's).

        Read by a new process, a named run without a result died with the old
        one: a crash the supervisor saw if the tree is the same, else the
        tree's own end, which is not the delivery's fault.
        """
        run = self.run
        if self.result is None and run is not None and tree is not None and self.tree == tree and run not in self.crashed_runs:
            return (*self.crashed_runs, run)
        return self.crashed_runs


class DeliveryRefused(ClankieError):
    """Raised by the PostgreSQL adapter when a record was not written (nothing was) or could not be read; ``code``
    says why in a word: ``stale_epoch`` (another tree holds the shard now), ``not_held`` (the shard is not this
    tree's), ``database_unavailable`` (the database did not answer). The file adapter raises
    :class:`clankie.appender.DiskError` instead, as it always has."""

    def __init__(self, code: str) -> None:
        self.code = code
        super().__init__(code)


LEASE_GONE = frozenset({"stale_epoch", "not_held"})
"""The refusals that mean the delivery's room is another tree's now: that tree answers it."""


class DeliveryRecords(Protocol):
    """Each delivery's current record."""

    def get(self, delivery_id: str, now: float) -> Retained | None:
        """The delivery's record; None if never seen, settled longer than the retention before ``now``, forgotten at
        the bound, or unreadable. Raises :class:`DeliveryRefused` when the store cannot be read."""
        ...

    def put(self, record: Retained, shard: Shard, now: float) -> None:
        """Keep ``record`` as the delivery's whole current record (``shard``: the shard of its room) before this
        returns; ``now`` is the time by which a newly written record that is already past the retention is not kept.
        Raises :class:`clankie.appender.DiskError` (the files) or :class:`DeliveryRefused` when nothing was kept."""
        ...

    def expire(self, now: float) -> int:
        """Forget the settled records older than the retention by ``now``; returns how many went."""
        ...

    def bound(self, keep: Collection[str]) -> int:
        """Forget records past ``max_retained``: the oldest settled first, then the oldest unsettled ones not in
        ``keep`` (the deliveries this process is running); returns how many went."""
        ...

    def prune(self, now: float) -> int:
        """The service's start: tidy the store once and expire by ``now``; returns how many records went."""
        ...

    async def aclose(self) -> None:
        """Make what was kept durable and let go of the store (a later write opens it again)."""
        ...
