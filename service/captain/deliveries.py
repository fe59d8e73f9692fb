"""Idempotent turn submission: retained results by delivery id, and honest counting of crashed runs.

The same delivery id with the same body gets the same result: while the turn
runs (a reconnected bridge attaches to it), after it ended, and after a
service restart (results are kept on disk for seven hours). The same id with
a different body is a conflict.

A delivery accepted but never finished (the service died) is run again when
it is re-submitted. A crash counts against it only if it was **part of the
run** that was live when the service died: the run's owner, or a message
already steered into the agent. A turn that was only accepted, queued, held
for a run that had not started streaming, or waiting for a closing lane was
never in that run and is never charged. So when a delivery joins a run, its
record names that run (written before the agent sees it); a
re-submitted record that still names a run and has no result means that run
died with the service, and its id is added to the record's ``crashed_runs``.
A delivery in ``poison_runs`` distinct crashed runs is a poison message: it
fails instead of taking the service down again. A graceful stop clears the
run from the record (:meth:`DeliveryStore.release`), so it never charges
anyone. :func:`reckon` is the pure rule; :class:`DeliveryStore` is the disk.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from clankie.appender import sync_dir_later, sync_fd_later
from clankie.clock import Clock
from clankie.jsonl import write_all
from clankie.protocol import TurnResult, TurnSubmit

log = logging.getLogger(__name__)

RETENTION_SECONDS = 7 * 3600


def fingerprint(submit: TurnSubmit) -> str:
    body = json.dumps(submit.to_wire(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Retained:
    """What the disk remembers about one delivery.

    ``run`` is the run it joined in the process that accepted it, until that
    run ends (None: it never joined one, or the run ended). ``crashed_runs``
    are the runs it was part of that died with the service, oldest first.
    """

    delivery_id: str
    fingerprint: str
    accepted_at: float
    result: TurnResult | None
    run: str | None = None
    crashed_runs: tuple[str, ...] = ()

    @property
    def crashed_so_far(self) -> tuple[str, ...]:
        """``crashed_runs``, plus the run it still names: read by a new process, that run died with the old one."""
        if self.result is None and self.run is not None and self.run not in self.crashed_runs:
            return (*self.crashed_runs, self.run)
        return self.crashed_runs


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


def reckon(record: Retained | None, fp: str, poison_runs: int) -> Reckoning:
    """What to do with a submission no turn of this process is running, given what the disk remembers."""
    if record is None:
        return RunIt(())
    if record.fingerprint != fp:
        return Conflict()
    if record.result is not None:
        return Answer(record.result)
    crashed = record.crashed_so_far
    if len(crashed) >= poison_runs:
        return Poison(crashed)
    return RunIt(crashed)


# ------------------------------------------------------------------- the disk


class DeliveryStore:
    """One small JSON file per delivery under ``<state>/captain/deliveries/``, replaced atomically by rename.

    A record reaches the kernel before the call returns (a crash of the
    service cannot lose it); its fsync and the directory's run on the sync
    threads (:mod:`clankie.appender`), so the turn never waits on the disk.

    Keeps the records of the deliveries this process accepted and has not
    finished, so :meth:`join`, :meth:`release` and :meth:`settle` rewrite them
    without reading the disk.
    """

    def __init__(self, directory: Path, clock: Clock, retention: float = RETENTION_SECONDS) -> None:
        self.directory = directory
        self._clock = clock
        self.retention = retention
        self._open: dict[str, Retained] = {}
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    def _path(self, delivery_id: str) -> Path:
        return self.directory / (hashlib.sha256(delivery_id.encode("utf-8")).hexdigest()[:40] + ".json")

    def load(self, delivery_id: str) -> Retained | None:
        """The retained record, or None if never seen, expired or unreadable.

        Records written before runs were counted (an ``attempts`` field, no
        ``run``) read as never having joined a run.
        """
        path = self._path(delivery_id)
        try:
            data = json.loads(path.read_bytes())
            result = TurnResult.model_validate(data["result"]) if data.get("result") else None
            run = data.get("run")
            crashed = data.get("crashed_runs", [])
            if not (run is None or isinstance(run, str)) or not all(isinstance(r, str) for r in crashed):
                raise TypeError("run ids must be strings")
            rec = Retained(
                data["delivery_id"], data["fingerprint"], float(data["accepted_at"]), result, run, tuple(crashed)
            )
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("unreadable delivery record %s (%s); treating it as new", path.name, type(exc).__name__)
            return None
        if rec.delivery_id != delivery_id or self._clock.wall() - rec.accepted_at > self.retention:
            return None
        return rec

    def accept(self, delivery_id: str, fp: str, crashed_runs: tuple[str, ...] = ()) -> Retained:
        """Record a delivery this process is about to run (in no run yet)."""
        rec = Retained(delivery_id, fp, self._clock.wall(), None, None, crashed_runs)
        self._write_all([rec])
        self._open[delivery_id] = rec
        return rec

    def join(self, run_id: str, delivery_ids: Iterable[str]) -> None:
        """Record that these accepted deliveries are now part of run ``run_id`` (one directory sync for all).

        Called before the agent sees them. A failed write is logged, never
        raised: the turn goes on, and a crash during it would just not be
        counted against it.
        """
        joined = []
        for did in delivery_ids:
            rec = self._open.get(did)
            if rec is not None and rec.run != run_id:
                joined.append(replace(rec, run=run_id))
        if not joined:
            return
        try:
            self._write_all(joined)
        except OSError as exc:
            log.error("could not record %d deliveries joining run %s: %s", len(joined), run_id, exc.strerror)
            return
        self._open.update((rec.delivery_id, rec) for rec in joined)

    def release(self, delivery_id: str) -> None:
        """Forget the run an accepted delivery joined (a graceful stop cut it): it stays to be run again, uncharged."""
        rec = self._open.pop(delivery_id, None)
        if rec is None or rec.run is None:
            return
        try:
            self._write_all([replace(rec, run=None)])
        except OSError as exc:  # the stop goes on; the restarted service will count this run against it
            log.error("could not release delivery %s from run %s: %s", delivery_id, rec.run, exc.strerror)

    def settle(self, delivery_id: str, result: TurnResult, record: Retained | None = None) -> None:
        """Retain the delivery's result: the record this process accepted, else ``record`` (loaded from disk)."""
        rec = self._open.pop(delivery_id, None) or record
        if rec is None:
            raise KeyError(f"delivery {delivery_id} was not accepted here")
        self._write_all([replace(rec, result=result, run=None)])

    def prune(self) -> int:
        """Delete records older than the retention; returns how many went."""
        now, gone = self._clock.wall(), 0
        for path in self.directory.glob("*.json"):
            try:
                accepted = float(json.loads(path.read_bytes()).get("accepted_at", 0))
            except (OSError, ValueError, AttributeError):
                accepted = 0.0
            if now - accepted > self.retention:
                path.unlink(missing_ok=True)
                gone += 1
        return gone

    def _write_all(self, records: list[Retained]) -> None:
        for rec in records:
            fields: dict[str, Any] = {
                "delivery_id": rec.delivery_id,
                "fingerprint": rec.fingerprint,
                "accepted_at": rec.accepted_at,
                "run": rec.run,
                "crashed_runs": list(rec.crashed_runs),
                "result": rec.result.to_wire() if rec.result is not None else None,
            }
            path = self._path(rec.delivery_id)
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                write_all(fd, json.dumps(fields, separators=(",", ":")).encode("utf-8"))
                sync_fd_later(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        sync_dir_later(self.directory)
