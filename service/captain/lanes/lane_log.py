"""A room's lane log: ``heard`` for every turn, ``said`` for every reply, one whole line each, rotated by size.

Written through :func:`service.captain.records.append_line` (one ``write`` per line; a refused write raises
``OSError`` and the caller decides what the turn becomes, :func:`~service.captain.records.disk_failure` naming
its code). One rotation for all lane logs together (``CLANKIE_LANE_LOG_ROTATE_BYTES``, ``CLANKIE_LANE_LOG_KEEP_BYTES``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clankie.clock import Clock
from clankie.protocol import Room
from clankie.rotation import Rotation, read_tail
from service.captain import records
from service.captain.lanes.keys import target_id

LANE_TEXT_MAX = 16_384
LANE_ENTRIES_MAX = 40


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
        records.append_line(self.path, record, self._rotation or records.rotation("lane"))
