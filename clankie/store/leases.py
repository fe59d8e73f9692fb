"""Shard leases on PostgreSQL: the adapter (acquire, renew, release), the fenced write, and the keeper shell.

One row per shard in ``clankie_shard_lease`` (``docs/multi-machine.md``, "Leases"). Every expiry is computed and
compared on the **database's** clock (``now()``), never the tree's:

- :meth:`PgLeases.acquire` takes a row that is free or expired, raising its epoch by one; two trees racing serialise
  on the row and one wins;
- :meth:`PgLeases.renew` extends the lease only while the holder and the epoch match and it has not expired;
- :meth:`PgLeases.release` frees it at once (a handback need not wait for the TTL);
- :meth:`PgLeases.fenced` opens the transaction every write for a shard runs in: it reads the lease row
  ``FOR KEY SHARE`` with the writer's :class:`Fence` and refuses (:class:`StaleEpoch`, counted in
  ``clankie_stale_epoch_writes_total``) when the epoch is stale, the holder another or the lease expired. An acquire
  locks the row ``FOR UPDATE``, which waits for that lock: a takeover waits for the write in flight, so no write
  with an old epoch lands after a new one was granted. A renew's ``UPDATE`` of the expiry does not wait for it, so
  the holder's own writes never hold up its renews.

:class:`LeaseKeeper` is the shell around the pure :class:`~clankie.store.lease.Lease` for one shard: it acquires,
renews every period, and reports through ``on_action`` when the shard is to be served and when it must stop. A renew
is raced against the local deadline on the injected clock, so a renew the database never answers (a partition, a
lock it waits on) still ends in ``stop_serving`` before the lease can expire on the database. Its time is the
clock's ``boottime`` (``CLOCK_BOOTTIME``): a host that was suspended wakes past its deadline, as the database's clock
says it is, and stops serving at its next step instead of believing the seconds it slept never passed.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import psycopg

from clankie.clock import Clock
from clankie.metrics import LEASE_TAKEOVERS, METER, STALE_EPOCH_WRITES
from clankie.store.database import Pool, SyncPool
from clankie.store.lease import Action, Kind, Lease, LeaseEvent, LeaseState, RowNow, Want, decide
from clankie.store.ports import StaleEpoch
from clankie.waits import set_within

log = logging.getLogger(__name__)

__all__ = ["Fence", "FenceFor", "LeaseKeeper", "LeaseRow", "NotHeld", "PgLeases", "StaleEpoch", "SyncFencing", "Want",
           "shard_name", "tree_holder"]

Connection = psycopg.AsyncConnection[tuple[object, ...]]
SyncConnection = psycopg.Connection[tuple[object, ...]]
T = TypeVar("T")
TRANSIENT = (psycopg.Error, OSError, TimeoutError)
"""What a database call may fail with and be tried again: an error, a dropped connection, a timeout."""


@dataclass(frozen=True, slots=True)
class Fence:
    """The token every write for a shard carries: the shard, this tree's holder id, the epoch it was granted."""

    shard: str
    holder: str
    epoch: int


class NotHeld(StaleEpoch):
    """Raised for a write for a shard this tree does not hold a lease on (it never reaches the database)."""


FenceFor = Callable[[str], Fence | None]
"""A tree's view of its leases: the :class:`Fence` of a shard (by :func:`shard_name`) it serves, or None."""


def held_fence(fence_for: FenceFor, shard: str) -> Fence:
    """The fence to write ``shard`` with, or :class:`NotHeld` (not counted: the tree knew it could not write)."""
    fence = fence_for(shard)
    if fence is None:
        raise NotHeld(f"shard {shard} is not held by this tree")
    return fence


@dataclass(frozen=True, slots=True)
class LeaseRow:
    """One shard's lease as the database sees it now: ``expires_in`` is seconds on its clock (negative: expired;
    ``-inf``: released or never held)."""

    shard: str
    holder: str | None
    epoch: int
    expires_in: float
    taken_from: str | None = None  # the last takeover: whose expired lease this shard was taken from
    taken_ago: float | None = None  # and how many seconds ago, on the database's clock
    preferred: bool = True  # whether the holder prefers the shard (False: served for another tree, takeover any)
    claimed_by: str | None = None  # a live claim on it: the tree that prefers it, waiting for the handback


EXPIRY_SLACK = 0.05
"""Seconds a standby waits past the moment the holder's lease is due to expire before asking again (the database
measured that moment; the slack covers the round trip)."""
HOLDER_HOST_CHARS = 64  # a host name is at most 64 bytes on Linux


def tree_holder(state_dir: Path, host: str | None = None) -> str:
    """A tree's name on its leases, ``<host>:<8 hex digits of its state directory>``: two trees on one host differ;
    one tree's service and bridge, and their next processes, agree (docs/multi-machine.md, "Leases")."""
    name = (host if host is not None else socket.gethostname())[:HOLDER_HOST_CHARS]
    return f"{name}:{hashlib.blake2b(str(state_dir.resolve()).encode(), digest_size=4).hexdigest()}"


def shard_name(shard_id: int, count: int) -> str:
    """A lease's shard key, ``"<id>/<count>"`` (an unsharded bot is ``"0/1"``)."""
    if not 0 <= shard_id < count:
        raise ValueError(f"shard {shard_id} is not one of {count}")
    return f"{shard_id}/{count}"


LOCK_SQL = b"""
SELECT holder, expires_at > now(), preferred, claimed_by,
       claimed_at IS NOT NULL AND claimed_at > now() - make_interval(secs => %(ttl)s),
       CASE WHEN expires_at > now() THEN extract(epoch FROM expires_at - now())::float8 ELSE 0 END
FROM clankie_shard_lease WHERE shard = %(shard)s FOR UPDATE
"""
"""An acquire's first step: lock the row (waiting for every fenced write in flight) and read what :func:`decide`
needs."""
TAKE_SQL = b"""
UPDATE clankie_shard_lease
SET epoch = epoch + 1, acquired_at = now(), holder = %(holder)s, preferred = %(preferred)s,
    expires_at = now() + make_interval(secs => %(ttl)s), renewed_at = now(), claimed_by = NULL, claimed_at = NULL,
    taken_from = CASE WHEN %(expired)s THEN holder ELSE taken_from END,
    taken_at = CASE WHEN %(expired)s THEN now() ELSE taken_at END
WHERE shard = %(shard)s RETURNING epoch
"""
JOIN_SQL = b"""
UPDATE clankie_shard_lease SET expires_at = now() + make_interval(secs => %(ttl)s), renewed_at = now()
WHERE shard = %(shard)s AND holder = %(holder)s RETURNING epoch
"""
CLAIM_SQL = b"""
UPDATE clankie_shard_lease SET claimed_by = %(holder)s, claimed_at = now() WHERE shard = %(shard)s
"""


class PgLeases:
    """The lease rows of one database, reached through ``pool``; counts the stale writes it refused."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.stale_writes = 0

    async def acquire(self, shard: str, holder: str, ttl: float, want: Want = Want.PREFER) -> int | None:
        """:meth:`try_acquire`'s epoch: the shard's, or None while another tree holds it."""
        return (await self.try_acquire(shard, holder, ttl, want))[0]

    async def try_acquire(self, shard: str, holder: str, ttl: float, want: Want = Want.PREFER) -> tuple[int | None, float]:
        """Take ``shard`` as :func:`decide` says for ``want``: its epoch, or None while another tree holds it. A free or
        expired lease is taken with the next epoch. One still live under ``holder`` is this tree's own (its service
        and its bridge both keep the tree's leases, and its next process after a crash takes them at once, not after
        the TTL): its expiry is extended and its epoch kept, so the tree's other writers go on.

        The row is locked ``FOR UPDATE`` first: that waits for every fenced write in flight (each holds the row
        ``FOR KEY SHARE``), so no write with the old epoch can commit after the new epoch is granted.

        Taking a shard whose lease **another** tree let expire is a takeover (``expired``): the row keeps whose it was
        and when (``taken_from``, ``taken_at``; a release handed on, or a tree's own expired lease taken back, is not
        one). Taking a shard released at this tree's claim is a ``handback``. Both are counted in
        ``clankie_lease_takeovers_total`` by the process that took it. A tree that prefers a shard another tree serves
        for it (not preferring it) claims it here; that tree hands it back at its next renew (:meth:`renew_claimed`).

        The second value is, while another tree holds the shard, the seconds until its lease expires on the database's
        clock (if it is not renewed by then): a standby asks again then rather than at its next period, so a dead
        holder's shard is taken within a moment of its expiry. 0 when the shard was taken.
        """
        async with self.pool.connection() as conn, conn.transaction():
            if want is not Want.JOIN:  # a join never makes a row: its tree's other process made it
                await conn.execute("INSERT INTO clankie_shard_lease (shard) VALUES (%s) ON CONFLICT (shard) DO NOTHING",
                                   (shard,))
            cur = await conn.execute(LOCK_SQL, {"shard": shard, "ttl": ttl})
            found = await cur.fetchone()
            if found is None:  # a join of a row never made: nothing to wait for but the next period
                return None, float("inf")
            now = RowNow(holder=None if found[0] is None else str(found[0]), live=bool(found[1]),
                         preferred=bool(found[2]), claimed_by=None if found[3] is None else str(found[3]),
                         claim_live=bool(found[4]))
            left = float(str(found[5]))
            move = decide(want, holder, now)
            if move.claim:
                await conn.execute(CLAIM_SQL, {"shard": shard, "holder": holder})
            if not move.take:  # a free row refused (a join, or another tree's claim) has no expiry to wait for
                return None, left if now.live else float("inf")
            cur = await conn.execute(JOIN_SQL if move.join else TAKE_SQL,
                                     {"shard": shard, "holder": holder, "ttl": ttl, "expired": move.how == "expired",
                                      "preferred": want is Want.PREFER})
            row = await cur.fetchone()
        assert row is not None  # the row was locked above
        epoch = int(str(row[0]))
        if move.how is not None:
            METER.count(LEASE_TAKEOVERS.of(move.how))
        if move.how == "expired":  # another tree's lease had expired: it died, hung or was cut off, and this tree took it
            log.warning("shard %s: taken over at epoch %d from %s, whose lease had expired", shard, epoch, now.holder)
        elif move.how == "handback":
            log.info("shard %s: handed back at epoch %d", shard, epoch)
        return epoch, 0.0

    async def renew(self, fence: Fence, ttl: float) -> bool:
        """Extend the lease by ``ttl`` from the database's now; False when it is no longer ours at this epoch."""
        return (await self.renew_claimed(fence, ttl))[0]

    async def renew_claimed(self, fence: Fence, ttl: float) -> tuple[bool, bool]:
        """:meth:`renew`, and whether a tree that prefers the shard has claimed it (a live claim on a lease its holder
        does not prefer): the holder is to hand it back."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """
                UPDATE clankie_shard_lease SET expires_at = now() + make_interval(secs => %(ttl)s), renewed_at = now()
                WHERE shard = %(shard)s AND holder = %(holder)s AND epoch = %(epoch)s AND expires_at > now()
                RETURNING NOT preferred AND claimed_by IS NOT NULL AND claimed_by <> holder
                          AND claimed_at > now() - make_interval(secs => %(ttl)s)
                """,
                {"shard": fence.shard, "holder": fence.holder, "epoch": fence.epoch, "ttl": ttl},
            )
            row = await cur.fetchone()
            return (False, False) if row is None else (True, bool(row[0]))

    async def release(self, fence: Fence) -> bool:
        """Free the lease now (the epoch stays, so the next holder's is higher); False when it was not ours."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """
                UPDATE clankie_shard_lease SET holder = NULL, expires_at = '-infinity'
                WHERE shard = %(shard)s AND holder = %(holder)s AND epoch = %(epoch)s
                """,
                {"shard": fence.shard, "holder": fence.holder, "epoch": fence.epoch},
            )
            return cur.rowcount == 1

    async def rows(self) -> list[LeaseRow]:
        """Every shard's lease, by shard (a released or never-held lease has no holder)."""
        return await read_rows(self.pool)

    @asynccontextmanager
    async def fenced(self, fence: Fence) -> AsyncIterator[Connection]:
        """A transaction for a write of ``fence.shard``, open only while ``fence`` is the shard's live lease.

        Raises :class:`StaleEpoch` (counted) before anything is written when it is not; anything the caller wrote
        commits with the check or not at all.
        """
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(FENCE_SQL, fence_params(fence))
            if await cur.fetchone() is None:
                self.stale_writes += 1
                raise refused(fence)
            yield conn


FENCE_SQL = b"""
SELECT 1 FROM clankie_shard_lease
WHERE shard = %(shard)s AND holder = %(holder)s AND epoch = %(epoch)s AND expires_at > now()
FOR KEY SHARE
"""
"""The first statement of every fenced write's transaction: a row only while ``fence`` is the live lease."""


def fence_params(fence: Fence) -> dict[str, object]:
    """:data:`FENCE_SQL`'s parameters for ``fence``."""
    return {"shard": fence.shard, "holder": fence.holder, "epoch": fence.epoch}


def refused(fence: Fence) -> StaleEpoch:
    """A write with ``fence`` was refused by the database's check: counted, logged, the error to raise."""
    METER.count(STALE_EPOCH_WRITES.of())
    log.warning("refused a write for shard %s at stale epoch %d", fence.shard, fence.epoch)
    return StaleEpoch(f"shard {fence.shard}: epoch {fence.epoch} is not the live lease")


class SyncFencing:
    """:meth:`PgLeases.fenced` for synchronous adapters (a lane's session tree, the spend ledger), on a sync pool;
    counts the stale writes it refused."""

    def __init__(self, pool: SyncPool, fence_for: FenceFor) -> None:
        self.pool, self.fence_for = pool, fence_for
        self.stale_writes = 0

    @contextmanager
    def fenced(self, shard: str) -> Iterator[tuple[SyncConnection, int]]:
        """A transaction for a write of ``shard``, open only while this tree holds the shard's live lease; yields the
        connection and the epoch the rows written are stamped with. Raises :class:`NotHeld` (not counted) for a
        shard this tree does not hold, :class:`StaleEpoch` (counted) when the database says the lease is not live."""
        fence = held_fence(self.fence_for, shard)
        with self.pool.connection() as conn, conn.transaction():
            if conn.execute(FENCE_SQL, fence_params(fence)).fetchone() is None:
                self.stale_writes += 1
                raise refused(fence)
            yield conn, fence.epoch


# taken_from and taken_at came with migration 0005, preferred and the claim with 0007: read through to_jsonb, an older
# schema answers None for them; a claim is shown while younger than a minute (its claimant renews it every try)
ROWS_SQL = b"""
SELECT shard, holder, epoch,
       CASE WHEN isfinite(expires_at) THEN extract(epoch FROM expires_at - now())::float8 ELSE '-Infinity'::float8 END,
       to_jsonb(l) ->> 'taken_from', extract(epoch FROM now() - (to_jsonb(l) ->> 'taken_at')::timestamptz)::float8,
       coalesce((to_jsonb(l) ->> 'preferred')::boolean, true),
       CASE WHEN (to_jsonb(l) ->> 'claimed_at')::timestamptz > now() - interval '1 minute'
            THEN to_jsonb(l) ->> 'claimed_by' END
FROM clankie_shard_lease l ORDER BY split_part(shard, '/', 2)::int, split_part(shard, '/', 1)::int
"""


def _row(raw: tuple[object, ...]) -> LeaseRow:
    return LeaseRow(str(raw[0]), None if raw[1] is None else str(raw[1]), int(str(raw[2])), float(str(raw[3])),
                    None if raw[4] is None else str(raw[4]), None if raw[5] is None else float(str(raw[5])),
                    bool(raw[6]), None if raw[7] is None else str(raw[7]))


async def read_rows(pool: Pool) -> list[LeaseRow]:
    """:meth:`PgLeases.rows` for a pool."""
    async with pool.connection() as conn:
        cur = await conn.execute(ROWS_SQL)
        return [_row(r) for r in await cur.fetchall()]


def read_rows_sync(conn: psycopg.Connection[tuple[object, ...]]) -> list[LeaseRow]:
    """Every shard's lease, on a plain connection (``clankie db status``)."""
    return [_row(r) for r in conn.execute(ROWS_SQL).fetchall()]


class LeaseKeeper:
    """Keeps one shard's lease for this tree: acquire, renew each period, stop serving at the local deadline.

    ``on_action`` is told each :attr:`Kind.SERVE` (with the epoch to write with) and :attr:`Kind.STOP_SERVING`
    (with why: ``deadline``, ``taken`` or ``released``); it must not block. ``want`` is what it may take
    (:class:`~clankie.store.lease.Want`). ``on_claimed`` is told at each renew that finds the shard claimed by a tree
    that prefers it (this tree serving it for that one); the owner then calls :meth:`hand_back` when it is ready.
    """

    def __init__(self, leases: PgLeases, shard: str, holder: str, clock: Clock, *, renew: float, ttl: float,
                 on_action: Callable[[Action], None] | None = None, want: Want = Want.PREFER,
                 on_claimed: Callable[[], None] | None = None) -> None:
        self.leases, self.shard, self.holder, self.clock = leases, shard, holder, clock
        self.want, self.on_claimed = want, on_claimed
        self._handing = False  # hand_back asked for: release at the next step
        self._handed = asyncio.Event()
        self.lease = Lease(renew=renew, ttl=ttl)
        self.ttl = ttl
        self.on_action = on_action
        self.wanted = True
        self._abandoned: set[asyncio.Future[object]] = set()
        self._said_taken = False  # "held by another tree" is logged once per wait, not at every try
        self._said_failed = ""  # the last acquire failure logged (its exception's name)
        self._serving = asyncio.Event()  # set while the lease is ours (between SERVE and STOP_SERVING)
        self._nudged = asyncio.Event()  # someone waits for the shard: try again now, not at the next period

    @property
    def fence(self) -> Fence | None:
        """The token to write with while the shard is ours, else None."""
        return Fence(self.shard, self.holder, self.lease.epoch) if self.lease.serving else None

    def _feed(self, event: LeaseEvent, epoch: int = 0) -> list[Action]:
        actions = self.lease.handle(event, self.clock.boottime(), epoch)
        for action in actions:
            if action.kind in (Kind.SERVE, Kind.STOP_SERVING):
                log.info("shard %s: %s at epoch %d%s", self.shard, action.kind.value, action.epoch,
                         f" ({action.reason})" if action.reason else "")
                if action.kind is Kind.SERVE:
                    self._serving.set()
                else:
                    self._serving.clear()
                if self.on_action is not None:
                    self.on_action(action)
        return actions

    async def _bounded(self, call: asyncio.Future[T], until: float) -> T | None:
        """``call``'s result, or None (the call cancelled, left to finish its cancellation) if the clock reaches
        ``until`` first."""
        sleeper = asyncio.ensure_future(self.clock.sleep(until - self.clock.boottime()))
        try:
            waited: set[asyncio.Future[T] | asyncio.Future[None]] = {call, sleeper}
            done, _ = await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
        if call in done:
            return call.result()
        call.cancel()
        self._abandoned.add(call)  # type: ignore[arg-type]
        call.add_done_callback(self._abandoned.discard)
        return None

    async def step(self) -> None:
        """One move: try to take the shard, or renew it, or notice the deadline; then wait until the next is due."""
        lease = self.lease
        if lease.state in (LeaseState.UNHELD, LeaseState.LOST, LeaseState.RELEASED):
            if not self.wanted:
                await self.clock.sleep(lease.renew)
                return
            self._feed(LeaseEvent.WANT)
            expires_in = lease.renew
            try:
                asked = self.leases.try_acquire(self.shard, self.holder, self.ttl, self.want)
                taken = await self._bounded(asyncio.ensure_future(asked), self.clock.boottime() + lease.ttl - lease.margin)
                epoch, expires_in = taken if taken is not None else (None, lease.renew)
            except TRANSIENT as exc:
                why = type(exc).__name__
                if why != self._said_failed:  # once per cause, not every renew period of an outage
                    log.warning("shard %s: acquire failed (%s); asking again every %gs", self.shard, why, lease.renew)
                self._said_failed = why
                epoch = None
                self._feed(LeaseEvent.FAILED)
            else:
                self._said_failed = ""
                self._feed(LeaseEvent.GRANTED if epoch else LeaseEvent.TAKEN, epoch or 0)
                if epoch is None and not self._said_taken:
                    log.info("shard %s: held by another tree; asking again every %gs", self.shard, lease.renew)
                self._said_taken = epoch is None
            if epoch is None:  # again at the next period, or as the holder's lease expires if that comes first
                await set_within(self._nudged, self.clock, min(lease.renew, expires_in + EXPIRY_SLACK))
                self._nudged.clear()
            return
        if self._handing:
            await self._release()
            return
        due = lease.due(self.clock.boottime())
        if due is LeaseEvent.DEADLINE:
            self._feed(due)
            return
        if due is LeaseEvent.RENEW_DUE:
            self._feed(due)
            fence = Fence(self.shard, self.holder, lease.epoch)
            try:
                renewed = await self._bounded(asyncio.ensure_future(self.leases.renew_claimed(fence, self.ttl)),
                                              lease.deadline)
            except TRANSIENT as exc:
                log.warning("shard %s: renew failed (%s)", self.shard, type(exc).__name__)
                self._feed(LeaseEvent.FAILED)
                return
            if renewed is None:
                self._feed(LeaseEvent.DEADLINE)
            else:
                self._feed(LeaseEvent.RENEWED if renewed[0] else LeaseEvent.REFUSED)
                if renewed[0] and renewed[1] and self.on_claimed is not None:
                    self.on_claimed()
            return
        wake = lease.wake_at()
        if wake is not None:  # or at once, for a handback
            await set_within(self._nudged, self.clock, wake - self.clock.boottime())
            self._nudged.clear()

    async def served(self, within: float) -> Fence | None:
        """The fence once the shard is ours, waiting at most ``within`` seconds for it: the tree's other process
        (its bridge) may have taken the lease a moment ago, and :meth:`run` is asked to join it now rather than at
        its next period. None when the shard is still not ours then (another tree holds it, or the database is
        away)."""
        if self.fence is None and self.wanted:
            self._nudged.set()
            await set_within(self._serving, self.clock, within)
        return self.fence

    async def run(self) -> None:
        """Keep the lease until cancelled."""
        while True:
            await self.step()

    async def hand_back(self) -> None:
        """Give the shard up at :meth:`run`'s next step (at once) and go on wanting it as before: the tree that claimed
        it takes it; this keeper's next acquire finds the claim and leaves the shard to it. Returns once released
        (or once the shard was not ours anyway)."""
        if not self.lease.serving:
            return
        self._handed.clear()
        self._handing = True
        self._nudged.set()
        await self._handed.wait()

    async def release(self) -> None:
        """Give the shard up now (stop serving first, then free the row) if it is ours; :meth:`run` must be stopped."""
        self.wanted = False
        await self._release()

    async def _release(self) -> None:
        self._handing = False
        self._nudged.clear()
        try:
            await self._free()
        finally:
            self._handed.set()

    async def _free(self) -> None:
        if not self.lease.serving:
            return
        epoch = self.lease.epoch
        self._feed(LeaseEvent.RELEASE)
        try:
            await self.leases.release(Fence(self.shard, self.holder, epoch))
        except TRANSIENT as exc:
            log.warning("shard %s: release failed (%s); it expires by itself", self.shard, type(exc).__name__)
            self._feed(LeaseEvent.FAILED)
            return
        self._feed(LeaseEvent.FREED)
