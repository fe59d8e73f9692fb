"""The service's stores in the PostgreSQL profile: the lanes' trees, the spend ledger and the delivery records in the
database, fenced.

Imported only when ``CLANKIE_STORE=postgres`` (the default profile never loads the driver). The DSN reaches the
service on its secrets pipe (:mod:`clankie.secrets`), never in its environment; the supervisor migrated the schema
before any child started (``clankie run``).

:class:`PgStores` opens a synchronous pool at construction (the lanes' and the ledger's ports are synchronous), and at
:meth:`PgStores.hold` an async pool with a :class:`~clankie.store.leases.LeaseKeeper` for each shard of this tree
(``CLANKIE_DISCORD_SHARD_IDS``, else every shard of the count; an unsharded bot is ``0/1``): each tries to take its
shard once before the service takes turns, then keeps renewing it. With ``CLANKIE_DISCORD_SHARD_TAKEOVER=any`` the
other shards of the count get a keeper that only joins the tree's own lease (:func:`shard_wants`): the bridge takes
another tree's shard, the service writes for it once joined, and loses it (its lanes dropped) when the bridge hands it
back. A lane's writes, a room's ledger lines and a
delivery's records carry the fence of the room's shard: a shard this tree does not hold (another tree has it) is refused before the
database (``NotHeld``), one whose lease went stale by the database's check (``StaleEpoch``, counted).

A lease lost (``stop_serving``: the deadline passed without a renew, or another tree took the shard) is told to
:attr:`PgStores.on_lost`, which the service points at the captain's ``stop_serving``: that shard's lanes are dropped from memory
(their next message reopens them from the database, with whatever the other holder wrote). The service keeps the
tree's leases beside its bridge (which opens a shard's gateway only while it holds them, bridge/shard_leases.py),
under the one name of the tree (:func:`~clankie.store.leases.tree_holder`): whichever takes a lease first, the other
joins it at the same epoch, and both renew it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable

from clankie.clock import Clock
from clankie.protocol import Room
from clankie.settings import Settings
from clankie.shards import others, preferred, room_shard
from clankie.store import database
from clankie.store.deliveries_pg import PgDeliveryRecords
from clankie.store.lane_ports import LaneTreeStore
from clankie.store.lanes_pg import PgLaneTrees
from clankie.store.lease import Action, Kind
from clankie.store.leases import Fence, LeaseKeeper, PgLeases, Want, shard_name
from clankie.store.spend_pg import PgSpendLedger
from service.captain.lanes import CaptainPaths, LanePlan
from service.captain.stores import Stores

log = logging.getLogger(__name__)


def tree_shards(settings: Settings) -> list[str]:
    """The shards this tree prefers, as lease names."""
    return [shard_name(*key) for key in preferred(settings.discord_shard_ids, settings.discord_shard_count)]


def shard_wants(settings: Settings) -> dict[str, Want]:
    """Each shard the service keeps a lease keeper for: the preferred ones (taken, claimed back from a tree serving
    them for this one), and with ``CLANKIE_DISCORD_SHARD_TAKEOVER=any`` every other shard of the count, joined only
    (the tree's bridge takes another tree's shard when its gateway can serve it; the service follows)."""
    wants = dict.fromkeys(tree_shards(settings), Want.PREFER)
    for key in others(settings.discord_shard_ids, settings.discord_shard_count, settings.discord_shard_takeover):
        wants[shard_name(*key)] = Want.JOIN
    return wants


class PgStores:
    """The PostgreSQL profile's stores and the leases they write under."""

    def __init__(self, settings: Settings, paths: CaptainPaths, holder: str) -> None:
        if settings.postgres_dsn is None:
            raise ValueError("the postgres profile needs its DSN")  # checked by the settings already
        self._dsn = settings.postgres_dsn.get_secret_value()
        self._settings, self._paths, self.holder = settings, paths, holder
        self.keepers: dict[str, LeaseKeeper] = {}
        self.on_lost: Callable[[Callable[[Room], bool]], int] | None = None  # drops the lanes of the rooms named
        self._tasks: list[asyncio.Task[None]] = []
        self._lease_pool: database.Pool | None = None
        self.pool = database.open_sync_pool(self._dsn, ttl=settings.lease_ttl_seconds)
        self.lanes = PgLaneTrees(self.pool, self.fence)
        self.spend = PgSpendLedger(self.pool, self.fence)
        self.deliveries = PgDeliveryRecords(self.pool, self.fence, retention=settings.delivery_record_retention_seconds,
                                            max_retained=settings.delivery_max_retained)

    def fence(self, shard: str) -> Fence | None:
        """The fence of ``shard`` while this tree serves it, else None."""
        keeper = self.keepers.get(shard)
        return None if keeper is None else keeper.fence

    async def held(self, room: Room) -> bool:
        """Whether this tree may write for ``room``'s shard, waiting at most a lease's time-to-live for it.

        The bridge opens a shard's gateway only once the tree holds its lease, and this process joins that lease at
        its keeper's next try; a message that arrives in between waits here for the join (asked for now) instead
        of running into a refused write. False: still not ours (another tree holds it, or the database is away);
        the turn runs and its first write is refused."""
        count = self._settings.discord_shard_count
        keeper = self.keepers.get(shard_name(*room_shard(room, count)))
        if keeper is None or keeper.fence is not None:
            return True
        return await keeper.served(self._settings.lease_ttl_seconds) is not None

    def stores(self) -> Stores:
        count = self._settings.discord_shard_count
        return Stores(lane=self._lane, ledger=self.spend, shard=lambda room: room_shard(room, count),
                      deliveries=self.deliveries, held=self.held)

    def _lane(self, plan: LanePlan) -> LaneTreeStore:
        """A lane's tree, keyed as its directory is named under ``<state>/captain`` (``rooms/<quoted key>``,
        ``system/…``, ``turns/…``: a one-shot's trees never mix with its room's lane), fenced by its room's shard."""
        key = plan.directory.relative_to(self._paths.root).as_posix()
        count = self._settings.discord_shard_count
        shard = room_shard(plan.room, count) if plan.room is not None else (0, count or 1)
        return self.lanes.lane(key, shard)

    async def hold(self, clock: Clock) -> None:
        """Try each shard once, all at once (so turns find their fences), then keep them in the background."""
        self._lease_pool = await database.open_pool(self._dsn, ttl=self._settings.lease_ttl_seconds, wait=False)
        leases = PgLeases(self._lease_pool)
        for shard, want in shard_wants(self._settings).items():
            self.keepers[shard] = LeaseKeeper(leases, shard, self.holder, clock, renew=self._settings.lease_renew_seconds,
                                              ttl=self._settings.lease_ttl_seconds, want=want,
                                              on_action=functools.partial(self._on_action, shard))
        await asyncio.gather(*(keeper.step() for keeper in self.keepers.values()))
        self._tasks = [asyncio.create_task(k.run(), name=f"lease-{k.shard}") for k in self.keepers.values()]

    def _on_action(self, shard: str, action: Action) -> None:
        if action.kind is Kind.STOP_SERVING:
            count = self._settings.discord_shard_count
            dropped = 0 if self.on_lost is None else self.on_lost(lambda room: shard_name(*room_shard(room, count)) == shard)
            log.warning("shard %s: lease lost (%s) at epoch %d: %d lanes dropped, its writes refused from now on",
                        shard, action.reason, action.epoch, dropped)

    async def close(self) -> None:
        """Stop renewing, give every shard back at once (a handback need not wait for the TTL), close the pools."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for keeper in self.keepers.values():
            await keeper.release()
        if self._lease_pool is not None:
            await self._lease_pool.close()
        await asyncio.to_thread(self.pool.close)
