"""Where the service keeps each lane's session tree, its spend ledger and its delivery records: today's files, or
the PostgreSQL profile.

:class:`Stores` is what the lane registry, the spending and the delivery records are handed: for a lane's plan, the
store of its session tree (a directory means today's files, :mod:`service.agent.tree_files`), the ledger's store (a
directory: the day files, :mod:`service.captain.spend.ledger_files`), and the delivery records' (a directory: the
delivery log, :mod:`service.captain.deliveries.delivery_log`). :func:`file_stores` is the default profile, exactly as
before; the PostgreSQL profile's are built by :mod:`service.captain.pg_stores`, imported only in that profile so
the default never loads the driver. :func:`clankie.shards.room_shard` is which shard a room's writes are fenced by.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from clankie.protocol import Room
from clankie.shards import room_shard
from clankie.store.delivery_ports import DeliveryRecords
from clankie.store.lane_ports import LaneTreeStore
from clankie.store.ports import Shard
from clankie.store.spend_ports import SpendLedgerStore
from service.captain.lanes import CaptainPaths, LanePlan


@dataclass(frozen=True, slots=True)
class Stores:
    """The service's stores in one profile."""

    lane: Callable[[LanePlan], Path | LaneTreeStore]
    ledger: Path | SpendLedgerStore
    shard: Callable[[Room], Shard]
    deliveries: Path | DeliveryRecords
    held: Callable[[Room], Awaitable[bool]] | None = None
    """Whether this tree may write for a room now, waiting a bounded while (the PostgreSQL profile's leases);
    None: always (one machine's files)."""


def file_stores(paths: CaptainPaths, shard_count: int | None) -> Stores:
    """Today's files under ``<state>/captain``: each lane's own directory, the day files in ``spend/``, the delivery
    log in ``deliveries/``."""
    return Stores(lane=lambda plan: plan.directory, ledger=paths.root / "spend",
                  shard=lambda room: room_shard(room, shard_count), deliveries=paths.deliveries)
