"""Content-free evidence of what the bridge did with each message.

One JSON line per event under ``<state>/receipts/bridge.jsonl``: ids, the
outcome, a reason *code*, the turn id and the ids of messages posted. Never
message text, never a token. The directory is 0700, the file 0600 and opened
without following symlinks; each line is one ``write`` followed by
``fsync``, so a crash can tear at most the last line.
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from typing import Any

from clankie.jsonl import append_all, encode_line
from clankie.paths import ensure_private_dir, receipts_dir

log = logging.getLogger(__name__)

FILENAME = "bridge.jsonl"
_CODE = re.compile(r"[^a-z0-9_]+")
_ID = re.compile(r"^[A-Za-z0-9_:.-]{1,128}$")
OUTCOMES = frozenset(
    {"dropped", "buffered", "deduplicated", "accepted", "settled", "absorbed", "silent", "failed", "reply_failed"}
)


def code(reason: str) -> str:
    """Normalise any reason to a stable code ``[a-z0-9_]{1,128}``."""
    cleaned = _CODE.sub("_", reason.lower()).strip("_")[:128]
    return cleaned or "unknown"


class Receipts:
    """Append-only receipt file; the only writer of ``<state>/receipts/bridge.jsonl``."""

    def __init__(self, state_dir: Path, *, wall: Any = time.time) -> None:
        directory = ensure_private_dir(receipts_dir(state_dir))
        self.path = directory / FILENAME
        self._wall = wall
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        self._fd = os.open(self.path, flags, 0o600)
        os.fchmod(self._fd, 0o600)
        self._end_torn_line()

    def _end_torn_line(self) -> None:
        """After a crash mid-line, start on a fresh line so the next receipt is not glued to the torn one."""
        size = os.fstat(self._fd).st_size
        if size == 0:
            return
        with open(self.path, "rb") as fh:
            fh.seek(size - 1)
            if fh.read(1) != b"\n":
                os.write(self._fd, b"\n")

    def record(
        self,
        outcome: str,
        *,
        delivery_id: str,
        channel_id: str,
        guild_id: str | None = None,
        reason: str | None = None,
        turn_id: str | None = None,
        message_ids: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """Write one line; every value is an id or a code, checked here."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown receipt outcome {outcome!r}")
        line: dict[str, Any] = {
            "v": 1,
            "at": round(self._wall(), 3),
            "outcome": outcome,
            "delivery_id": _safe_id(delivery_id),
            "guild_id": _safe_id(guild_id) if guild_id else None,
            "channel_id": _safe_id(channel_id),
        }
        if reason is not None:
            line["reason"] = code(reason)
        if turn_id is not None:
            line["turn_id"] = _safe_id(turn_id)
        if message_ids:
            line["message_ids"] = [_safe_id(m) for m in message_ids]
        try:
            append_all(self._fd, encode_line(line))
            os.fsync(self._fd)
        except OSError as exc:
            log.error("cannot write receipt: %s", exc.strerror)
        return line

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _safe_id(value: str) -> str:
    return value if _ID.match(value) else code(value)
