"""Idempotent turn submission: retained results by delivery id, in memory and on disk.

The same delivery id with the same body gets the same result: while the turn
runs (a reconnected bridge attaches to it), after it ended, and after a
service restart (results are kept on disk for seven hours). The same id with
a different body is a conflict. A delivery that was accepted but never
finished (the service died mid-run) is run again on re-submission, at most
:data:`MAX_ATTEMPTS` times in all.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clankie.clock import Clock
from clankie.paths import make_private_dirs
from clankie.protocol import TurnResult, TurnSubmit

log = logging.getLogger(__name__)

RETENTION_SECONDS = 7 * 3600
MAX_ATTEMPTS = 2


def fingerprint(submit: TurnSubmit) -> str:
    body = json.dumps(submit.to_wire(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Retained:
    """What the disk remembers about one delivery."""

    delivery_id: str
    fingerprint: str
    accepted_at: float
    attempts: int
    result: TurnResult | None


class DeliveryStore:
    """One small JSON file per delivery under ``<state>/captain/deliveries/``."""

    def __init__(self, directory: Path, clock: Clock, retention: float = RETENTION_SECONDS) -> None:
        self.directory = directory
        self._clock = clock
        self.retention = retention
        make_private_dirs(directory)

    def _path(self, delivery_id: str) -> Path:
        return self.directory / (hashlib.sha256(delivery_id.encode("utf-8")).hexdigest()[:40] + ".json")

    def load(self, delivery_id: str) -> Retained | None:
        """The retained record, or None if never seen, expired or unreadable."""
        path = self._path(delivery_id)
        try:
            data = json.loads(path.read_bytes())
            result = TurnResult.model_validate(data["result"]) if data.get("result") else None
            rec = Retained(data["delivery_id"], data["fingerprint"], float(data["accepted_at"]), int(data["attempts"]), result)
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("unreadable delivery record %s (%s); treating it as new", path.name, type(exc).__name__)
            return None
        if rec.delivery_id != delivery_id or self._clock.wall() - rec.accepted_at > self.retention:
            return None
        return rec

    def accept(self, delivery_id: str, fp: str, attempts: int) -> None:
        self._write(delivery_id, {"fingerprint": fp, "accepted_at": self._clock.wall(), "attempts": attempts, "result": None})

    def settle(self, delivery_id: str, fp: str, attempts: int, accepted_at: float, result: TurnResult) -> None:
        self._write(
            delivery_id,
            {"fingerprint": fp, "accepted_at": accepted_at, "attempts": attempts, "result": result.to_wire()},
        )

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

    def _write(self, delivery_id: str, fields: dict[str, Any]) -> None:
        path = self._path(delivery_id)
        tmp = path.with_suffix(".tmp")
        data = json.dumps({"delivery_id": delivery_id, **fields}, separators=(",", ":")).encode("utf-8")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
