"""Content-free evidence of what the bridge did with each message.

One JSON line per event under ``<state>/receipts/bridge.jsonl``: ids, the
outcome, a reason *code*, the turn id and the ids of messages posted. Never
message text, never a token. The directory is 0700, the file 0600 and opened
without following symlinks. Each line reaches the kernel in one ``write``
when it is recorded (a crash of the bridge cannot lose it) and the disk with
the next group sync (:mod:`clankie.appender`), which runs off the event
loop: no receipt ever holds up a message. A write the disk refuses is cut
back, never left torn; the first refusal of an outage is one log line, the
rest are counted until a receipt is written again (:class:`clankie.quiet.Quiet`). The file is rotated by size into numbered segments
``bridge.jsonl.000001``, … with a total cap (``CLANKIE_AUDIT_ROTATE_BYTES``,
``CLANKIE_AUDIT_KEEP_BYTES``; :mod:`clankie.rotation`), only between whole lines.

A message's closing receipt (:data:`CLOSING`) is written before its journal
``close`` line (:mod:`bridge.journal`), so a bridge killed between the two
leaves a receipt for an entry its journal says is open; the next bridge reads
those receipts back (:meth:`Receipts.closings`) and closes the entry from them
instead of closing the message a second time (:mod:`bridge.recovery`).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NotRequired, TypedDict, get_args

from clankie.appender import Appender, DiskError
from clankie.jsonl import parse_lines
from clankie.paths import ensure_private_dir, receipts_dir
from clankie.protocol import TurnOutcome
from clankie.quiet import Quiet
from clankie.rotation import Rotation, segments
from clankie.settings import Settings

log = logging.getLogger(__name__)

FILENAME = "bridge.jsonl"
ROTATION = Rotation(rotate_bytes=16 * 1024 * 1024, keep_bytes=256 * 1024 * 1024)
_CODE = re.compile(r"[^a-z0-9_]+")
_ID = re.compile(r"^[A-Za-z0-9_:.-]{1,128}$")
Step = Literal["dropped", "buffered", "waiting", "deduplicated", "accepted", "reply_failed", "expired", "recovered",
               "reacted"]
"""What a receipt says besides a turn's outcome: admission's verdicts and the steps of a delivery."""
Outcome = TurnOutcome | Step
"""A receipt's ``outcome``: how a turn ended (its :class:`TurnOutcome`), or one step of a message's way."""
OUTCOMES: frozenset[str] = frozenset({*(o.value for o in TurnOutcome), *get_args(Step)})
CLOSING: frozenset[str] = frozenset({*(o.value for o in TurnOutcome), "dropped", "expired"})
"""The outcomes that close a message: a turn's, or ``dropped`` (out of a full backlog) and ``expired``; exactly one
per admitted message."""
CLOCK_SLACK = 1.0
"""Seconds :meth:`Receipts.closings` reads past ``since``: the wall clock may step back a little between lines."""


def audit_rotation(settings: Settings) -> Rotation:
    """The receipts' rotation from ``CLANKIE_AUDIT_ROTATE_BYTES`` and ``CLANKIE_AUDIT_KEEP_BYTES``."""
    return Rotation(rotate_bytes=settings.audit_rotate_bytes, keep_bytes=settings.audit_keep_bytes)


def code(reason: str) -> str:
    """Normalise any reason to a stable code ``[a-z0-9_]{1,128}``."""
    cleaned = _CODE.sub("_", reason.lower()).strip("_")[:128]
    return cleaned or "unknown"


class ReceiptIds(TypedDict):
    """The ids every receipt carries (keyword arguments of :meth:`Receipts.record`)."""

    delivery_id: str
    channel_id: str
    guild_id: str | None


class ReceiptLine(TypedDict):
    """One stored receipt: ids and codes only, never message text."""

    v: Literal[1]
    at: float
    outcome: str
    delivery_id: str
    guild_id: str | None
    channel_id: str
    reason: NotRequired[str]
    turn_id: NotRequired[str]
    message_ids: NotRequired[list[str]]


@dataclass(frozen=True, slots=True)
class Closing:
    """A closing receipt already written, as :meth:`Receipts.closings` reads it back."""

    outcome: str  # one of CLOSING
    at: float
    reason: str | None
    turn_id: str | None
    message_ids: tuple[str, ...]


class Receipts:
    """Append-only receipt file; the only writer of ``<state>/receipts/bridge.jsonl``."""

    def __init__(self, state_dir: Path, *, wall: Callable[[], float] = time.time, rotation: Rotation = ROTATION) -> None:
        directory = ensure_private_dir(receipts_dir(state_dir))
        self.path = directory / FILENAME
        self._wall = wall
        self._appender = Appender(self.path, rotation=rotation)
        self.quiet = Quiet("receipts", logger=log)  # a full disk: one line, then a count until a receipt is written

    @property
    def last_error(self) -> str | None:
        return self._appender.last_error

    def record(
        self,
        outcome: Outcome,
        *,
        delivery_id: str,
        channel_id: str,
        guild_id: str | None = None,
        reason: str | None = None,
        turn_id: str | None = None,
        message_ids: tuple[str, ...] = (),
    ) -> ReceiptLine:
        """Write one line; every value is an id or a code, checked here."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown receipt outcome {outcome!r}")
        line: ReceiptLine = {
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
            self._appender.append(line)
        except DiskError as exc:
            self.quiet.refused(exc.code)
            return line
        self.quiet.written()
        self._appender.sync_soon()
        return line

    def closings(self, delivery_ids: Collection[str], since: float) -> dict[str, Closing]:
        """The newest closing receipt (:data:`CLOSING`) already written for each of ``delivery_ids``, read from the
        end of the file (and then of its rotated segments, newest first) back to the first line older than
        ``since``, the wall time of the oldest message asked about (no receipt of it is older): a start after a
        crash reads the last moments' receipts, not the file. A torn or garbled line is skipped, as every reader
        does."""
        wanted = set(delivery_ids)
        found: dict[str, Closing] = {}
        for path in (self.path, *reversed(segments(self.path))):
            if len(found) == len(wanted):
                break
            for line in _newest_first(path):
                did, outcome, at = line.get("delivery_id"), line.get("outcome"), line.get("at")
                if not isinstance(at, int | float):
                    continue
                if at < since - CLOCK_SLACK:
                    return found
                if isinstance(did, str) and did in wanted and outcome in CLOSING and did not in found:
                    mids = line.get("message_ids")
                    found[did] = Closing(str(outcome), float(at), _opt_str(line.get("reason")),
                                         _opt_str(line.get("turn_id")),
                                         tuple(str(m) for m in mids) if isinstance(mids, list) else ())
        return found

    def close(self) -> None:
        self._appender.close()


def _newest_first(path: Path, block: int = 1 << 16) -> Iterator[dict[str, object]]:
    """The readable lines of ``path``, newest first, read from its end ``block`` bytes at a time (a torn or garbled
    line is skipped; no file, no lines)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return
    with os.fdopen(fd, "rb") as fh:
        end = fh.seek(0, os.SEEK_END)
        rest = b""  # the start of a line whose beginning is in the block before
        while end > 0:
            start = max(0, end - block)
            fh.seek(start)
            rows = (fh.read(end - start) + rest).split(b"\n")
            end = start
            rest = rows.pop(0) if start > 0 else b""
            for row in reversed(rows):
                yield from parse_lines(row)


def _opt_str(value: object) -> str | None:
    return str(value) if value is not None else None


def _safe_id(value: str) -> str:
    return value if _ID.match(value) else code(value)
