"""A full disk is a state, not a flood of log lines: one line for a stretch of refused writes, then a count.

Writes that only record what happened (the bridge's receipts and closing
journal lines, the service's evidence) use a :class:`Quiet` for each kind:
the first refusal of an outage is one error line, the rest are counted until
a write of that kind succeeds again, and then one line says how many were
not written. An outage is two lines per kind, not several for every turn.
"""

from __future__ import annotations

import logging

_log = logging.getLogger(__name__)


class Quiet:
    """One log line for a stretch of refused writes of one kind, then a count until one is written again."""

    def __init__(self, what: str, consequence: str = "", *, logger: logging.Logger = _log) -> None:
        self.what = what
        self.consequence = consequence
        self.lost = 0  # refused since the last write that worked
        self._log = logger

    def refused(self, code: str) -> None:
        if not self.lost:
            self._log.error("%s not written (%s)%s; counted, not logged, until one is", self.what, code,
                            self.consequence)
        self.lost += 1

    def written(self) -> None:
        if self.lost:
            self._log.warning("%s written again; %d were not", self.what, self.lost)
            self.lost = 0
