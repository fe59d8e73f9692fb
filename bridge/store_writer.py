"""The postgres profile's writer of the bridge's durable memory: each change, in the order made, off the event loop.

In ``CLANKIE_STORE=postgres`` the bridge keeps each shard's gateway session (:mod:`bridge.gateway_session`) and the
ids it admitted (:class:`bridge.admission.Ingress`) in the database, behind the ports of :mod:`clankie.store.ports`
(:class:`~clankie.store.bridge_pg.PgGatewaySessions`, :class:`~clankie.store.bridge_pg.PgDedupe`). Their synchronous,
in-memory forms stay what the bridge decides with; each change they make is queued here and written by one task
(:meth:`StoreWriter.run`), so a message is never held up by the database. The queue is one FIFO for both stores: an
admitted id's row is written before any later sequence of its shard's session, so a sequence in the database never
covers a message whose id is not there (the takeover's exactly-once argument, docs/multi-machine.md).

Each change carries the :class:`~clankie.store.leases.Fence` its shard had when the change was made (``fence_for``:
the tree's view of its leases, None for a shard it does not serve now): a change made in one tenure is never written
under the next, and one made while the shard is not this tree's is refused before the database
(:class:`~clankie.store.leases.NotHeld`). A refused write (:class:`~clankie.store.ports.StaleEpoch`: another tree took
the shard) is dropped, and logged once per shard until a write of it lands again; the adapter counted it. A write
that fails for the database's sake (``transient``: an error, a dropped connection, a timeout) is tried again after
``retry`` seconds, :data:`ATTEMPTS` times in all, then dropped (logged): by then the lease is lost, and the next holder
reads what did land. At most :data:`MAX_PENDING` changes wait; past it a new change is dropped and counted (logged
once), what a database too slow for the bridge's pace costs: a taker may replay (and de-duplicate) a little more.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from clankie.clock import Clock
from clankie.store.ports import DedupeStore, GatewaySessionStore, SessionRecord, Shard, StaleEpoch
from clankie.waits import within

if TYPE_CHECKING:  # the driver's module is imported only in the postgres profile
    from bridge.dedupe import Dedupe
    from bridge.gateway_session import SessionKeeper
    from clankie.store.leases import Fence, FenceFor

log = logging.getLogger(__name__)

MAX_PENDING = 4096
"""Changes waiting to be written, at most (a sequence's moves coalesce: mostly the admitted ids of a burst)."""
ATTEMPTS = 3
"""Tries of one change whose write failed for the database's sake, before it is dropped."""


class Op(Enum):
    SAVE = "save"  # a new session (READY)
    ADVANCE = "advance"  # the session's journaled sequence moved
    FORGET = "forget"  # the session is given up (an IDENTIFY follows)
    RETAIN = "retain"  # an id admitted, until its expiry
    DISCARD = "discard"  # an admitted id forgotten (its turn could not be run)
    PRUNE = "prune"  # the shard's expired ids


@dataclass(frozen=True, slots=True)
class Change:
    """One change to write, with the fence its shard had when it was made."""

    op: Op
    shard: Shard
    fence: Fence | None
    record: SessionRecord | None = None
    seq: int = 0
    message_id: str = ""
    fingerprint: str = ""
    at: float = 0.0  # RETAIN: the expiry; PRUNE: now


class Recalls(DedupeStore, Protocol):
    """A dedupe store that can hand back a shard's unexpired ids (:meth:`clankie.store.bridge_pg.PgDedupe.recent`)."""

    async def recent(self, now: float, limit: int) -> list[tuple[str, int, float]]:
        """The shard's ids unexpired at ``now``, newest expiry first, at most ``limit``: (id, fingerprint key, expiry)."""
        ...


class StoreWriter:
    """The one writer of the bridge's changes to the store; :meth:`run` writes them until cancelled."""

    def __init__(self, sessions: Callable[[FenceFor], GatewaySessionStore],
                 dedupe: Callable[[Shard, FenceFor], Recalls], fence_for: FenceFor, clock: Clock, *,
                 transient: tuple[type[Exception], ...], retry: float, bound: int = MAX_PENDING) -> None:
        self._fence: Fence | None = None  # the fence of the change being written (the adapters' fence_for)
        self.sessions = sessions(self._writing)
        self._dedupe_for = dedupe
        self._dedupes: dict[Shard, Recalls] = {}
        self.fence_for = fence_for
        self.clock = clock
        self.transient = transient
        self.failing: tuple[type[Exception], ...] = (*transient, TimeoutError)  # a read or a drain, bounded by the caller
        self.retry = retry
        self.bound = bound
        self.pending: deque[Change] = deque()
        self.written = 0
        self.refused = 0  # changes a fence refused (the shard another tree's)
        self.dropped = 0  # changes given up: the queue full, or the database failing them ATTEMPTS times
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._quiet: set[Shard] = set()  # shards whose refusal was logged, until a write of theirs lands
        self._said_full = False

    def _writing(self, shard: str) -> Fence | None:
        fence = self._fence
        return fence if fence is not None and fence.shard == shard else None

    def dedupe(self, shard: Shard) -> Recalls:
        """The dedupe store of ``shard`` (one per shard this bridge runs: bounded by them)."""
        store = self._dedupes.get(shard)
        if store is None:
            store = self._dedupes[shard] = self._dedupe_for(shard, self._writing)
        return store

    # ------------------------------------------------------------ what the bridge changed (never blocks)

    def _fence_of(self, shard: Shard) -> Fence | None:
        return self.fence_for(f"{shard[0]}/{shard[1]}")

    def save(self, shard: Shard, record: SessionRecord) -> None:
        self._put(Change(Op.SAVE, shard, self._fence_of(shard), record=record))

    def advance(self, shard: Shard, seq: int) -> None:
        self._put(Change(Op.ADVANCE, shard, self._fence_of(shard), seq=seq))

    def forget(self, shard: Shard) -> None:
        self._put(Change(Op.FORGET, shard, self._fence_of(shard)))

    def retain(self, shard: Shard, message_id: str, fingerprint: str, expires: float) -> None:
        self._put(Change(Op.RETAIN, shard, self._fence_of(shard), message_id=message_id, fingerprint=fingerprint,
                         at=expires))

    def discard(self, shard: Shard, message_id: str) -> None:
        self._put(Change(Op.DISCARD, shard, self._fence_of(shard), message_id=message_id))

    def prune(self, shard: Shard, now: float) -> None:
        self._put(Change(Op.PRUNE, shard, self._fence_of(shard), at=now))

    def _put(self, change: Change) -> None:
        tail = self.pending[-1] if self.pending else None
        if (change.op is Op.ADVANCE and tail is not None and tail.op in (Op.ADVANCE, Op.SAVE)
                and tail.shard == change.shard and tail.fence == change.fence):
            # the sequence moved again before the last change of its shard was written: one write, the newer sequence
            if tail.op is Op.ADVANCE:
                self.pending[-1] = replace(tail, seq=max(tail.seq, change.seq))
            elif tail.record is not None and (tail.record.seq is None or change.seq > tail.record.seq):
                self.pending[-1] = replace(tail, record=replace(tail.record, seq=change.seq))
            return
        if len(self.pending) >= self.bound:
            self.dropped += 1
            if not self._said_full:
                self._said_full = True
                log.warning("store: %d changes wait for the database; newer ones are dropped until it catches up",
                            len(self.pending))
            return
        self.pending.append(change)
        self._idle.clear()
        self._wake.set()

    # ------------------------------------------------------------ reading

    async def drained(self) -> None:
        """Until every change made so far is written (or given up)."""
        await self._idle.wait()

    async def load(self, shard: Shard) -> SessionRecord | None:
        """The session the database keeps for ``shard`` (whichever tree wrote it last), or None."""
        return await self.sessions.load(shard)

    async def recent(self, shard: Shard, now: float, limit: int) -> list[tuple[str, int, float]]:
        """``shard``'s admitted ids unexpired at ``now`` (whichever tree admitted them), at most ``limit``."""
        return await self.dedupe(shard).recent(now, limit)

    # ------------------------------------------------------------ the gateway opening, the stop

    async def adopt(self, keeper: SessionKeeper | None, memory: Dedupe, shards: list[Shard], bound_s: float) -> None:
        """Each time the gateway is about to open: each shard's session as the database keeps it, whichever tree
        wrote it last (a taken shard's dead holder's: RESUMEd from the sequence it journaled), and the ids its holders
        admitted, into ``memory`` (a replayed message the last holder admitted is a duplicate here too). Each read is
        bounded by ``bound_s``; a database that does not answer costs a new session (``keeper.set_aside``: the copy
        in memory may be older than what another holder resumed and advanced since) or a replay answered again."""
        if keeper is not None:
            try:
                await within(keeper.adopt(shards), bound_s)
            except self.failing as exc:  # the database's fault (or slowness): a new session is safe, if dearer
                log.warning("gateway: the shards' sessions could not be read from the database (%s); identifying",
                            type(exc).__name__)
                keeper.set_aside(shards)
        now = self.clock.wall()
        for shard in shards:
            try:
                recalled = memory.recall(await within(self.recent(shard, now, memory.bound), bound_s))
            except self.failing as exc:
                log.warning("dedupe: shard %d/%d's admitted ids not read (%s)", shard[0], shard[1], type(exc).__name__)
                continue
            log.info("dedupe: %d admitted ids of shard %d/%d recalled from the database", recalled, *shard)
            self.prune(shard, now)

    async def stop(self, keeper: SessionKeeper | None, bound_s: float) -> None:
        """At the stop (:meth:`run` already cancelled): write what the last moments changed, within ``bound_s`` (a
        planned stop leaves the lease to the tree's service, so these writes are still fenced good)."""
        if keeper is not None:
            keeper.flush()
        try:
            await within(self.write_pending(), bound_s)
        except self.failing as exc:  # stopping anyway: the next holder reads what did land
            log.warning("store: %d changes not written at the stop (%s)", len(self.pending), type(exc).__name__)

    # ------------------------------------------------------------ writing

    async def run(self) -> None:
        """Write each change in order, until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self.write_pending()

    async def write_pending(self) -> None:
        """Write every change waiting now, in order (at a stop: what the last moments changed)."""
        while self.pending:
            change = self.pending.popleft()
            try:
                await self._write(change)
            except asyncio.CancelledError:  # the run stopped mid-write: the change is written at the stop instead
                self.pending.appendleft(change)
                raise
        self._said_full = False
        self._idle.set()

    async def _write(self, change: Change) -> None:
        for attempt in range(1, ATTEMPTS + 1):
            self._fence = change.fence
            try:
                await self._apply(change)
            except StaleEpoch:  # NotHeld too: the shard is not this tree's (any more); the adapter counted it
                self.refused += 1
                if change.shard not in self._quiet:
                    self._quiet.add(change.shard)
                    log.warning("store: a %s for shard %d/%d was refused: the shard is not this tree's any more; "
                                "its changes are dropped", change.op.value, *change.shard)
                return
            except self.transient as exc:
                if attempt == ATTEMPTS:
                    self.dropped += 1
                    log.warning("store: a %s for shard %d/%d not written (%s, %d tries); dropped", change.op.value,
                                *change.shard, type(exc).__name__, attempt)
                    return
                await self.clock.sleep(self.retry)
                continue
            finally:
                self._fence = None
            self.written += 1
            self._quiet.discard(change.shard)
            return

    async def _apply(self, change: Change) -> None:
        match change.op:
            case Op.SAVE:
                assert change.record is not None
                await self.sessions.save(change.shard, change.record)
            case Op.ADVANCE:
                await self.sessions.advance(change.shard, change.seq)
            case Op.FORGET:
                await self.sessions.forget(change.shard)
            case Op.RETAIN:
                await self.dedupe(change.shard).add(change.message_id, change.fingerprint, change.at)
            case Op.DISCARD:
                await self.dedupe(change.shard).discard(change.message_id)
            case Op.PRUNE:
                await self.dedupe(change.shard).prune(change.at)
