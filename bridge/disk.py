"""A full state directory is a state: while it lasts, messages waiting for a turn slot stay in the journal.

A turn that fails because a disk refused its records (the service's
``service_disk_full`` or ``service_disk_error``, or the bridge's own journal
refusing the line: ``disk_full`` and kin) ends with its outcome like any
failed turn, and one log line says why. What waits for a slot is another
matter: it was journaled before the disk filled, and starting it now would
only fail it too. :class:`DiskHold` says whether a waiting turn may start:
not while the state filesystem has less than :data:`clankie.paths.LOW_SPACE` free (what the
supervisor's status calls "state filesystem full"), and not for
:data:`RECHECK_S` seconds after a turn failed for the disk (a quota or a
failing disk does not show in the free space). The bridge looks again every
:data:`RECHECK_S` seconds and lets what waits run once there is room. The
heartbeat says so: ``waiting held (disk_full)``.

Writes that only record what happened (receipts, a delivery's closing line in
the journal) are :class:`clankie.quiet.Quiet` about a full disk: the first
refusal is one log line, the rest are counted until a write succeeds, so an
outage is a few lines, not several for every turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TypeGuard

from clankie.clock import Clock
from clankie.paths import LOW_SPACE, free_bytes
from clankie.protocol import Code

log = logging.getLogger(__name__)

RECHECK_S = 5.0
"""Seconds between looks at the disk while waiting turns are held."""
SERVICE_CODES = frozenset({Code.SERVICE_DISK_FULL, Code.SERVICE_DISK_ERROR})


def is_disk_code(code: str | None) -> TypeGuard[str]:
    """Whether a failure code says a disk refused a write (the service's, or the bridge's own ``disk_*``)."""
    return code is not None and (code in SERVICE_CODES or code.startswith("disk_"))


class DiskHold:
    """Whether waiting turns may start, and a timer that looks again while they may not."""

    def __init__(self, state_dir: Path, clock: Clock, *, recheck: float = RECHECK_S) -> None:
        self.state_dir = state_dir
        self.free: Callable[[Path], int | None] = free_bytes  # a test may put a full disk here
        self._clock = clock
        self._recheck = recheck
        self._until = float("-inf")  # monotonic: after a refused turn, hold until then at least
        self._timer: asyncio.Task[None] | None = None
        self.reason: str | None = None  # why waiting turns are held now (None: they are not)

    def refused(self, code: str) -> None:
        """A turn failed because a disk refused a write: hold what waits for a while, then look again."""
        self._until = self._clock.monotonic() + self._recheck
        self._hold(code)

    def room(self) -> bool:
        """Whether a waiting turn may start now (else it stays in the journal)."""
        free = self.free(self.state_dir)
        if free is not None and free < LOW_SPACE:
            self._hold(self.reason or "disk_full")
            return False
        if self._clock.monotonic() < self._until:
            return False
        if self.reason is not None:
            log.info("the state directory has room again (%s bytes free): waiting messages run", free)
            self.reason = None
        return True

    def _hold(self, code: str) -> None:
        if self.reason is None:
            log.warning("the disk refused a turn (%s): messages waiting for a turn slot stay in the journal until "
                        "there is room (looking again every %.0f s)", code, self._recheck)
        self.reason = code

    def wake_later(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after :data:`RECHECK_S` seconds (once, however often this is asked meanwhile)."""
        if self._timer is None or self._timer.done():
            self._timer = asyncio.get_running_loop().create_task(self._wake(callback), name="disk-recheck")

    async def _wake(self, callback: Callable[[], None]) -> None:
        await self._clock.sleep(self._recheck)
        self._timer = None
        callback()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

