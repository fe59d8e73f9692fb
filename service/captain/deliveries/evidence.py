"""Content-free evidence per delivery: one line per step of its life (ids and codes, never words), rotated by size.

Written through :func:`service.captain.records.append_line` under ``CLANKIE_AUDIT_ROTATE_BYTES`` /
``CLANKIE_AUDIT_KEEP_BYTES``. A write the disk refuses is one log line, then a count of what is lost until a
write succeeds again, instead of a line for every entry of every turn.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from clankie.clock import Clock
from clankie.protocol import Caller
from clankie.quiet import Quiet
from clankie.rotation import Rotation, read_all
from service.captain import records

log = logging.getLogger(__name__)


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
            records.append_line(self.path, entry, self._rotation or records.rotation("audit"))
        except OSError as exc:  # the turn's own line names the delivery; this one is about the file
            self._quiet.refused(exc.strerror or type(exc).__name__)
            return
        self._quiet.written()

    def of(self, delivery_id: str) -> list[str]:
        """The events of one delivery, from every segment still kept (a test's and a tool's read, not the service's)."""
        return [e["event"] for e in read_all(self.path) if e.get("delivery_id") == delivery_id]
