"""The captain's small append-only files: the lane log and content-free delivery evidence.

Each line is one ``write`` on an ``O_APPEND`` descriptor; its fsync runs on
the sync threads (:func:`clankie.appender.sync_fd_later`), never on the
event loop. A crash leaves at most a torn last line, which readers skip.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from clankie.appender import sync_fd_later
from clankie.clock import Clock
from clankie.jsonl import append_all, encode_line, read_lines
from clankie.paths import make_private_dirs
from clankie.protocol import Room

from service.captain.keys import target_id

log = logging.getLogger(__name__)

LANE_TEXT_MAX = 16_384
LANE_ENTRIES_MAX = 40


def append_line(path: Path, record: dict[str, Any]) -> None:
    make_private_dirs(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        append_all(fd, encode_line(record))
        sync_fd_later(fd)
    finally:
        os.close(fd)


class LaneLog:
    """``heard`` for every turn, ``said`` for every reply, per room."""

    def __init__(self, path: Path, room: Room, clock: Clock) -> None:
        self.path = path
        self._target = target_id(room)
        self._clock = clock

    def heard(self, text: str) -> None:
        self._append("heard", text)

    def said(self, text: str) -> None:
        self._append("said", text)

    def recent(self) -> list[dict[str, Any]]:
        return read_lines(self.path)[-LANE_ENTRIES_MAX:]

    def _append(self, kind: str, text: str) -> None:
        append_line(
            self.path, {"at": self._clock.wall(), "kind": kind, "text": text[:LANE_TEXT_MAX], "targetId": self._target}
        )


class Evidence:
    """Content-free evidence per delivery: ``accepted``, then ``settled``/``absorbed``/``declined``/``failed``.

    Carries ids and codes only, never message or reply text.
    """

    def __init__(self, path: Path, clock: Clock) -> None:
        self.path = path
        self._clock = clock

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
    ) -> None:
        """Append one entry; ``cause`` (e.g. ``poison``) and ``crashed_runs`` (runs the service died in) when given."""
        entry: dict[str, Any] = {"at": self._clock.wall(), "delivery_id": delivery_id, "event": event, "lane": lane}
        optional = {"code": code, "turn_id": turn_id, "cause": cause, "crashed_runs": crashed_runs}
        entry.update((key, value) for key, value in optional.items() if value is not None)
        try:
            append_line(self.path, entry)
        except OSError as exc:
            log.error("could not write evidence for delivery %s: %s", delivery_id, exc.strerror)

    def of(self, delivery_id: str) -> list[str]:
        return [e["event"] for e in read_lines(self.path) if e.get("delivery_id") == delivery_id]
