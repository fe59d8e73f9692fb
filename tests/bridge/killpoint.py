"""``python -m tests.bridge.killpoint``: ``python -m bridge`` with a kill point, for tests that kill at an instant.

With ``CLANKIE_TEST_KILL_AFTER_RECEIPT=<outcome>`` set, the process SIGKILLs
itself right after it has written its first receipt with that outcome (the
line is in the kernel by then, as every receipt is once recorded), before
anything else the bridge does next: the instant a ``kill -9`` from outside
can only hope to hit. Everything else is the real bridge, run as its
``__main__``; a test starts the next life with plain ``python -m bridge``.
"""

from __future__ import annotations

import os
import runpy
import signal
from typing import Any

from bridge import receipts

KILL_AFTER = "CLANKIE_TEST_KILL_AFTER_RECEIPT"


def arm(outcome: str) -> None:
    """Make the first ``outcome`` receipt this process writes its last act."""
    record = receipts.Receipts.record

    def record_then_die(self: receipts.Receipts, what: receipts.Outcome, **ids: Any) -> receipts.ReceiptLine:
        line = record(self, what, **ids)
        if what == outcome:
            os.kill(os.getpid(), signal.SIGKILL)
        return line

    receipts.Receipts.record = record_then_die  # type: ignore[method-assign, assignment]


if __name__ == "__main__":
    want = os.environ.get(KILL_AFTER)
    if want:
        arm(want)
    runpy.run_module("bridge", run_name="__main__", alter_sys=True)
