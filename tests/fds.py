"""What this process holds open under a directory.

A count of every descriptor in ``/proc/self/fd`` is shared with whatever else the test worker does (xdist's
channel, a socket an earlier test left for the garbage collector), so it can move by one for reasons that are
not the code under test. The files a test created live under its own directory; those are the ones to count.
"""

from __future__ import annotations

import os
from pathlib import Path


def open_under(root: Path) -> list[str]:
    """The paths under ``root`` that this process has a descriptor open on (one entry per descriptor)."""
    prefix = str(root.resolve()) + os.sep
    held: list[str] = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed between the listing and the read (the listing's own descriptor, for one)
            continue
        if target.startswith(prefix):
            held.append(target)
    return held
