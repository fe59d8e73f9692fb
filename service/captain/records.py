"""How the captain's small append-only files are written: one whole line at a time, rotated by size.

Two files use it: each room's lane log (:mod:`service.captain.lanes.lane_log`) and the content-free delivery
evidence (:mod:`service.captain.deliveries.evidence`); this module is what they share (the line, the rotation, the
code a refused write fails a turn with), so neither package reaches into the other.

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
from pathlib import Path
from typing import Any

from clankie.appender import DiskError, append_once
from clankie.jsonl import encode_line
from clankie.paths import make_private_dirs
from clankie.protocol import Code
from clankie.rotation import Rotation
from clankie.settings import Settings

_DEFAULT_ROTATIONS = {
    "lane": Rotation(rotate_bytes=1024 * 1024, keep_bytes=512 * 1024 * 1024, shared=True),
    "audit": Rotation(rotate_bytes=16 * 1024 * 1024, keep_bytes=256 * 1024 * 1024),
}
_rotations = dict(_DEFAULT_ROTATIONS)
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


def rotation(kind: str) -> Rotation:
    """The rotation in force for ``kind`` (``"lane"``: every lane log; ``"audit"``: the evidence)."""
    return _rotations[kind]


def reset() -> None:
    """The rotations back to their defaults (:func:`clankie.observability.reset`, for tests)."""
    _rotations.update(_DEFAULT_ROTATIONS)


def append_line(path: Path, record: dict[str, Any], rotation: Rotation | None = None) -> None:
    """Append one whole line to ``path``; rotate it right after if it reached ``rotation.rotate_bytes``.

    ``rotation`` defaults to the lane logs'.
    """
    make_private_dirs(path.parent)
    append_once(path, encode_line(record), rotation=rotation or _rotations["lane"], sync=True)
