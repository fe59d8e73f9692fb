"""discord.py's rate-limit buckets, swept in amortised time.

discord.py 2.7 keeps one ``Ratelimit`` per REST route key, and a channel's
routes are keyed by its id, so a bridge answering in many rooms holds many
buckets. Each time it creates a bucket it calls
``HTTPClient._try_clear_expired_ratelimits``, which, once there are 256 or
more, walks *every* bucket looking for ones idle for 300 s. A bridge that
posts in ten thousand rooms within five minutes therefore does a walk of up to
ten thousand buckets per new room: quadratic work on the event loop that every
room's messages wait behind (``bench/scale.py`` saw the bridge at 70% CPU and
ingress p99 rise from 0.3 s at 1,000 rooms to 1 s at 10,000, with most
samples in that walk).

:func:`amortise_bucket_sweep` replaces the walk on one client's ``http`` with
the same sweep run only when the number of buckets has doubled since the
last one (and never below discord.py's own 256). Which buckets go is
unchanged (discord.py's ``is_inactive``); only how often it looks. The
buckets stay bounded: after a sweep at most twice the buckets that were
still active remain, plus those created since.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

FLOOR = 256
"""discord.py's own threshold: below it nothing is swept."""


class AmortisedSweep:
    """The replacement for ``HTTPClient._try_clear_expired_ratelimits`` (one per client)."""

    def __init__(self, buckets: dict[str, Any]) -> None:
        self.buckets = buckets
        self.next_at = FLOOR
        self.sweeps = 0
        self.swept = 0
        self.inspected = 0  # buckets looked at by every sweep so far: the work the sweep costs

    def __call__(self) -> None:
        if len(self.buckets) < self.next_at:
            return
        self.inspected += len(self.buckets)
        idle = [key for key, bucket in self.buckets.items() if bucket.is_inactive()]
        for key in idle:
            del self.buckets[key]
        self.sweeps += 1
        self.swept += len(idle)
        self.next_at = max(FLOOR, 2 * len(self.buckets))


def amortise_bucket_sweep(http: Any) -> AmortisedSweep | None:
    """Install :class:`AmortisedSweep` on a discord.py ``HTTPClient``; None (nothing changed) if its shape is unknown.

    Only an instance attribute is set, so the library's class is untouched and
    a discord.py without these names keeps its own behaviour (logged once).
    """
    buckets = getattr(http, "_buckets", None)
    if not isinstance(buckets, dict) or not callable(getattr(http, "_try_clear_expired_ratelimits", None)):
        log.warning("discord.py's rate-limit buckets are not where expected; keeping its own sweep")
        return None
    sweep = AmortisedSweep(buckets)
    http._try_clear_expired_ratelimits = sweep
    return sweep
