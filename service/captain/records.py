"""The captain's small append-only files: the lane log and content-free delivery evidence.

Each line is written by :func:`clankie.appender.append_once`: one ``write``
on an ``O_APPEND`` descriptor opened for that line and closed at once; its
fsync runs on the sync threads, never on the event loop, and no descriptor is
held while it waits, so open files never grow with turns or rooms. A crash
leaves at most a torn last line, which readers skip.

Both files rotate by size (:mod:`clankie.rotation`), right after a whole
line: a lane log at ``CLANKIE_LANE_LOG_ROTATE_BYTES`` with one cap for all
lane logs together (``CLANKIE_LANE_LOG_KEEP_BYTES``), the evidence at
``CLANKIE_AUDIT_ROTATE_BYTES`` under ``CLANKIE_AUDIT_KEEP_BYTES``. The
service sets both from its settings at start (:func:`configure`).

A write the disk refuses raises ``OSError`` from the lane log (the caller
decides what the turn becomes; :func:`disk_failure` names the code) and is
one log line from the evidence, which then counts what it loses until a
write succeeds again, instead of a line for every entry of every turn.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import Any

from clankie.appender import DiskError, append_once
from clankie.clock import Clock
from clankie.jsonl import encode_line
from clankie.paths import make_private_dirs
from clankie.protocol import Caller, Code, Room
from clankie.quiet import Quiet
from clankie.rotation import Rotation, read_all, read_tail
from clankie.settings import Settings
from service.captain.keys import target_id

log = logging.getLogger(__name__)

LANE_TEXT_MAX = 16_384
LANE_ENTRIES_MAX = 40

_DEFAULT_ROTATIONS = {
    "lane": Rotation(rotate_bytes=1024 * 1024, keep_bytes=512 * 1024 * 1024, shared=True),
    "audit": Rotation(rotate_bytes=16 * 1024 * 1024, keep_bytes=256 * 1024 * 1024),
}
_rotations = dict(_DEFAULT_ROTATIONS)
read_lines = read_all  # a rotated file read whole: its kept segments, oldest first, then the live file
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_BROKEN = frozenset({errno.EIO, errno.EROFS})


def disk_failure(exc: OSError | DiskError) -> str | None:
    """The turn's failure code for a write the disk refused: ``service_disk_full`` (no space, quota or file size
    limit) or ``service_disk_error`` (a failing or read-only disk); None for any other error, which stays loud.
    An appender's :class:`~clankie.appender.DiskError` carries the same errno."""
    if exc.errno in _NO_ROOM:
        return Code.SERVICE_DISK_FULL
    return Code.SERVICE_DISK_ERROR if exc.errno in _BROKEN else None


def configure(settings: Settings) -> None:
    """Take the rotation of lane logs and evidence from the service's settings (once, at start)."""
    _rotations["lane"] = Rotation(settings.lane_log_rotate_bytes, settings.lane_log_keep_bytes, shared=True)
    _rotations["audit"] = Rotation(settings.audit_rotate_bytes, settings.audit_keep_bytes)


def reset() -> None:
    """The rotations back to their defaults (:func:`clankie.observability.reset`, for tests)."""
    _rotations.update(_DEFAULT_ROTATIONS)


def append_line(path: Path, record: dict[str, Any], rotation: Rotation | None = None) -> None:
    """Append one whole line to ``path``; rotate it right after if it reached ``rotation.rotate_bytes``.

    ``rotation`` defaults to the lane logs'.
    """
    make_private_dirs(path.parent)
    append_once(path, encode_line(record), rotation=rotation or _rotations["lane"], sync=True)


class LaneLog:
    """``heard`` for every turn, ``said`` for every reply, per room."""

    def __init__(self, path: Path, room: Room, clock: Clock, *, rotation: Rotation | None = None) -> None:
        self.path = path
        self._target = target_id(room)
        self._clock = clock
        self._rotation = rotation

    def heard(self, text: str) -> None:
        self._append("heard", text)

    def said(self, text: str) -> None:
        self._append("said", text)

    def recent(self) -> list[dict[str, Any]]:
        return read_tail(self.path, LANE_ENTRIES_MAX)

    def _append(self, kind: str, text: str) -> None:
        record = {"at": self._clock.wall(), "kind": kind, "text": text[:LANE_TEXT_MAX], "targetId": self._target}
        append_line(self.path, record, self._rotation or _rotations["lane"])


class Evidence:
    """Content-free evidence per delivery: ``accepted``, then ``settled``/``absorbed``/``declined``/``failed``.

    Carries ids and codes only, never message or reply text.
    """

    def __init__(self, path: Path, clock: Clock, *, rotation: Rotation | None = None) -> None:
        self.path = path
        self._clock = clock
        self._rotation = rotation
        self._quiet = Quiet("evidence", logger=log)  # a full disk: one line, then a count until an entry is written

    def record(
        self,
        delivery_id: str,
        event: str,
        *,
        lane: str,
        code: str | None = None,
        turn_id: str | None = None,
        cause: str | None = None,
        crashed_runs: int | None = None,
        caller: Caller | None = None,
    ) -> None:
        """Append one entry; ``cause`` (e.g. ``poison``), ``crashed_runs`` (runs the service died in) and an operator
        action's ``caller`` (its pid and uid on ``control.sock``) when given."""
        entry: dict[str, Any] = {"at": self._clock.wall(), "delivery_id": delivery_id, "event": event, "lane": lane}
        optional = {"code": code, "turn_id": turn_id, "cause": cause, "crashed_runs": crashed_runs,
                    "caller_pid": caller.pid if caller is not None else None,
                    "caller_uid": caller.uid if caller is not None else None}
        entry.update((key, value) for key, value in optional.items() if value is not None)
        try:
            append_line(self.path, entry, self._rotation or _rotations["audit"])
        except OSError as exc:  # the turn's own line names the delivery; this one is about the file
            self._quiet.refused(exc.strerror or type(exc).__name__)
            return
        self._quiet.written()

    def of(self, delivery_id: str) -> list[str]:
        """The events of one delivery, from every segment still kept (a test's and a tool's read, not the service's)."""
        return [e["event"] for e in read_all(self.path) if e.get("delivery_id") == delivery_id]
