"""A disk that refuses writes, for real: RLIMIT_FSIZE makes the kernel refuse (EFBIG) any write past a size."""

from __future__ import annotations

import contextlib
import resource
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def writes_refused_past(size: int) -> Iterator[None]:
    """Inside the block, no file of this process grows past ``size`` bytes, as on a full disk (then both are restored)."""
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, old_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
