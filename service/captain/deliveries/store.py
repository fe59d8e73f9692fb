"""Idempotent turn submission: retained results by delivery id, and honest counting of crashed runs.

The same delivery id with the same body gets the same result: while the turn
runs (a reconnected bridge attaches to it), after it ended, and after a
service restart (results are kept on disk
``CLANKIE_DELIVERY_RECORD_RETENTION_SECONDS``, seven hours by default, pruned
by age as the service goes, at most ``CLANKIE_DELIVERY_MAX_RETAINED`` of
them; a delivery not yet finished is never pruned by age). The same id with a
different body is a conflict.

A delivery accepted but never finished (the service died) is run again when
it is re-submitted. A crash counts against it only if it was **part of the
run** that was live when the service died: the run's owner, or a message
already steered into the agent. A turn that was only accepted, queued, held
for a run that had not started streaming, or waiting for a closing lane was
never in that run and is never charged. So when a delivery joins a run, its
record names that run and the supervised tree the process belongs to
(``CLANKIE_TREE_ID``, drawn by each ``clankie run``; written before the agent
sees it). A re-submitted record that still names a run and has no result
means that run died with the service; it is added to the record's
``crashed_runs`` only if it ran in **this** tree: the supervisor that spawned
this process lived through that death, so it was the service's own crash. A
run that died with its tree (the supervisor killed, the machine rebooted), or
in a service no supervisor watched, charges nobody. A delivery in
``poison_runs`` distinct crashed runs is a poison message: it fails instead of
taking the service down again. A stop clears the runs from the records as it
begins (:meth:`DeliveryStore.release_all`), so neither a graceful stop nor one
the supervisor has to finish with SIGKILL charges anyone. :func:`reckon` is
the pure rule; :class:`DeliveryStore` keeps the records, one appended line per
change (:mod:`service.captain.deliveries.delivery_log`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from clankie.appender import DiskError
from clankie.clock import Clock
from clankie.paths import make_private_dirs
from clankie.protocol import TurnResult, TurnSubmit
from clankie.store.delivery_ports import DeliveryRecords, DeliveryRefused
from clankie.store.delivery_ports import Retained as Retained  # the record's home is the port; imported from here too
from clankie.store.ports import Shard
from service.captain.deliveries.delivery_log import MAX_RETAINED, SEGMENT_BYTES, DeliveryLog
from service.captain.deliveries.record import fields

log = logging.getLogger(__name__)

RETENTION_SECONDS = 7 * 3600
REFUSED = (DiskError, DeliveryRefused)  # a write the files or the database refused (each has a ``code``)


def fingerprint(submit: TurnSubmit) -> str:
    body = json.dumps(submit.to_wire(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


# ------------------------------------------------------------------- the rule (pure)


@dataclass(frozen=True, slots=True)
class Conflict:
    """The id was accepted with a different body."""


@dataclass(frozen=True, slots=True)
class Answer:
    """The delivery already has its result."""

    result: TurnResult


@dataclass(frozen=True, slots=True)
class Poison:
    """The delivery was part of too many runs the service died in: fail it, do not run it again."""

    crashed_runs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RunIt:
    """Run the turn (again), remembering the runs it was part of that crashed."""

    crashed_runs: tuple[str, ...]


Reckoning = Conflict | Answer | Poison | RunIt


def reckon(record: Retained | None, fp: str, poison_runs: int, *, tree: str | None) -> Reckoning:
    """What to do with a submission no turn of this process is running, given what the disk remembers.

    ``tree`` is this process's supervised tree: only a run that died in it counts as crashed.
    """
    if record is None:
        return RunIt(())
    if record.fingerprint != fp:
        return Conflict()
    if record.result is not None:
        return Answer(record.result)
    crashed = record.crashed_so_far(tree)
    if len(crashed) >= poison_runs:
        return Poison(crashed)
    return RunIt(crashed)


# ------------------------------------------------------------------- the records


class DeliveryStore:
    """The service's delivery records, kept behind the port :class:`~clankie.store.delivery_ports.DeliveryRecords`.

    ``where`` is a directory for today's files, an append-only, segmented log under ``<state>/captain/deliveries/``
    (:mod:`.delivery_log`, with ``retention``, ``max_retained`` and ``segment_bytes``), or an adapter of the port
    that keeps its own bounds (the PostgreSQL profile's, :mod:`clankie.store.deliveries_pg`).

    Every change writes the delivery's whole record. In the files it
    reaches the kernel before the call returns (a crash of the service cannot
    lose it) and the disk on the sync threads, so a turn never waits on the
    disk; in the database it is committed, fenced by the lease of the shard of
    the delivery's room. A write the store refuses raises
    :class:`~clankie.appender.DiskError` (the files) or
    :class:`~clankie.store.delivery_ports.DeliveryRefused` (the database)
    from :meth:`accept` and :meth:`settle` and changes nothing; :meth:`join`
    and :meth:`release` log it.

    Settled records are retained ``retention`` seconds after acceptance
    (expired on every accept and settle; unsettled ones at any age) and at most
    ``max_retained`` of them (past that the oldest settled ones are forgotten
    first: re-submitted, such a delivery runs again as new). Keeps the records
    of the deliveries this process accepted and has not finished, so
    :meth:`join`, :meth:`release` and :meth:`settle` never read the store; a
    settled result's text is read back only by :meth:`load`.
    """

    def __init__(self, where: Path | DeliveryRecords, clock: Clock, retention: float = RETENTION_SECONDS, *,
                 max_retained: int = MAX_RETAINED, segment_bytes: int = SEGMENT_BYTES, tree: str | None = None) -> None:
        self._clock = clock
        self.tree = tree  # the supervised tree this process belongs to, written with every run it joins
        self._open: dict[str, Retained] = {}
        self._shards: dict[str, Shard] = {}  # the shard of each open delivery's room (its writes are fenced by it)
        self._stopping = False  # a stop began: no run is recorded any more (one cut by it charges nobody)
        if isinstance(where, Path):
            make_private_dirs(where)
            where = FileDeliveryRecords(DeliveryLog(where, now=clock.wall(), retention=retention,
                                                    max_retained=max_retained, segment_bytes=segment_bytes))
        self.records: DeliveryRecords = where

    @property
    def directory(self) -> Path:
        """The files' directory (the files profile's: tests and tools read it)."""
        return self._files().log.directory

    @property
    def log(self) -> DeliveryLog:
        """The files' log (the files profile's: tests and tools read its segments)."""
        return self._files().log

    def _files(self) -> FileDeliveryRecords:
        if not isinstance(self.records, FileDeliveryRecords):
            raise AttributeError("these delivery records are not files")
        return self.records

    def load(self, delivery_id: str) -> Retained | None:
        """The retained record, or None if never seen, expired, forgotten or unreadable.

        Records written before runs were counted (an ``attempts`` field, no
        ``run``) read as never having joined a run. Raises
        :class:`~clankie.store.delivery_ports.DeliveryRefused` when the
        database cannot be read (a delivery it may have settled is not run).
        """
        return self.records.get(delivery_id, self._clock.wall())

    def accept(self, delivery_id: str, fp: str, crashed_runs: tuple[str, ...] = (), *,
               shard: Shard = (0, 1)) -> Retained:
        """Record a delivery this process is about to run (in no run yet), its room on ``shard``; raises DiskError or
        DeliveryRefused if it cannot be written."""
        now = self._clock.wall()
        rec = Retained(delivery_id, fp, now, None, None, crashed_runs)
        self.records.put(rec, shard, now)
        self.records.expire(now)
        self._open[delivery_id] = rec
        self._shards[delivery_id] = shard
        self.records.bound(keep=self._open)
        return rec

    def join(self, run_id: str, delivery_ids: Iterable[str]) -> None:
        """Record that these accepted deliveries are now part of run ``run_id`` (one write each).

        Called before the agent sees them. A failed write is logged, never
        raised: the turn goes on, and a crash during it would just not be
        counted against the deliveries it could not record. Once a stop has
        begun (:meth:`release_all`) nothing is recorded.
        """
        if self._stopping:
            return
        joined = [replace(rec, run=run_id, tree=self.tree) for did in delivery_ids
                  if (rec := self._open.get(did)) is not None and rec.run != run_id]
        for n, rec in enumerate(joined):
            try:
                self._write(rec)
            except REFUSED as exc:
                log.error("could not record %d deliveries joining run %s: %s", len(joined) - n, run_id, exc.code)
                return
            self._open[rec.delivery_id] = rec

    def release(self, delivery_id: str) -> None:
        """Forget the run an accepted delivery joined (a graceful stop cut it): it stays to be run again, uncharged."""
        rec = self._open.pop(delivery_id, None)
        if rec is not None:
            self._unrun(rec)
            self._shards.pop(delivery_id, None)

    def release_all(self) -> None:
        """A stop begins: forget the run of every delivery in one, and record no run from now on.

        Done first, before the runs are aborted, so a stop the supervisor has
        to finish with SIGKILL charges nobody either; the deliveries stay open
        (a turn that still settles retains its result as usual).
        """
        self._stopping = True
        for did, rec in list(self._open.items()):
            self._open[did] = self._unrun(rec)

    def _unrun(self, rec: Retained) -> Retained:
        if rec.run is None:
            return rec
        clear = replace(rec, run=None, tree=None)
        try:
            self._write(clear)
        except REFUSED as exc:  # the stop goes on; a restart in this tree will count this run against it
            log.error("could not release delivery %s from run %s: %s", rec.delivery_id, rec.run, exc.code)
            return rec
        return clear

    def settle(self, delivery_id: str, result: TurnResult, record: Retained | None = None, *,
               shard: Shard | None = None) -> None:
        """Retain the delivery's result: the record this process accepted, else ``record`` (loaded from the store,
        its room on ``shard``).

        Raises DiskError or DeliveryRefused if the store refuses it (the record stays as it was).
        """
        rec = self._open.pop(delivery_id, None) or record
        if rec is None:
            raise KeyError(f"delivery {delivery_id} was not accepted here")
        on = self._shards.pop(delivery_id, None) or shard or (0, 1)
        now = self._clock.wall()
        self.records.put(replace(rec, result=result, run=None, tree=None), on, now)
        self.records.expire(now)

    def prune(self) -> int:
        """Forget records older than the retention, and tidy the store once; returns how many records went.

        The first call (the service's start-up) also migrates records of the
        old one-file-per-delivery format and unlinks segments no record needs.
        """
        return self.records.prune(self._clock.wall())

    async def aclose(self) -> None:
        """Close the log once its last lines are on the disk (a later write opens a new segment)."""
        await self.records.aclose()

    def _write(self, rec: Retained) -> None:
        self.records.put(rec, self._shards.get(rec.delivery_id, (0, 1)), self._clock.wall())


class FileDeliveryRecords:
    """The file adapter of :class:`~clankie.store.delivery_ports.DeliveryRecords`: the delivery log of one directory,
    each record one appended line (:mod:`.delivery_log`, :mod:`.record`); the shard is not needed on one machine."""

    def __init__(self, log: DeliveryLog) -> None:
        self.log = log

    def get(self, delivery_id: str, now: float) -> Retained | None:
        entry = self.log.get(delivery_id)
        if entry is None or (entry.settled and now - entry.accepted_at > self.log.retention):
            return None  # an unfinished delivery's record is kept at any age (nothing lost)
        result = None
        if entry.settled:
            try:
                data = self.log.read(entry)
                if data.get("delivery_id") != delivery_id:
                    raise ValueError("the line is another delivery's")
                result = TurnResult.model_validate(data["result"])
            except OSError as exc:
                log.warning("cannot read back delivery %s (%s); treating it as new", delivery_id, exc.strerror)
                return None
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                log.warning("unreadable delivery record %s (%s); treating it as new", delivery_id, type(exc).__name__)
                return None
        return Retained(delivery_id, entry.fingerprint, entry.accepted_at, result, entry.run, entry.crashed_runs, entry.tree)

    def put(self, record: Retained, shard: Shard, now: float) -> None:
        result = record.result.to_wire() if record.result is not None else None
        line = fields(record.delivery_id, record.fingerprint, record.accepted_at, record.run, record.crashed_runs,
                      result, record.tree)
        self.log.put(record.delivery_id, line, now)

    def expire(self, now: float) -> int:
        return self.log.expire(now)

    def bound(self, keep: Collection[str]) -> int:
        return self.log.bound(keep)

    def prune(self, now: float) -> int:
        self.log.take_ownership()
        gone, self.log.expired_at_start = self.log.expired_at_start, 0
        return gone + self.log.expire(now)

    async def aclose(self) -> None:
        await self.log.aclose()
