"""The background sync threads (:mod:`clankie.disksync`), drained or held busy, for tests of what a file costs while
its sync waits.

A sync works on a duplicate descriptor while it runs. One job per sync thread, all waiting for each other, can start
only after every job queued before them has ended: that is how a test knows every earlier sync is done. Held busy,
the same threads stand for a disk that lags.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from clankie.disksync import SYNC_THREADS, sync_pool


def drain_syncs() -> None:
    """Return once every sync handed to the sync threads so far has run."""
    barrier = threading.Barrier(SYNC_THREADS)
    for job in [sync_pool().submit(barrier.wait) for _ in range(SYNC_THREADS)]:
        job.result()


async def drained_syncs() -> None:
    """:func:`drain_syncs` from a running event loop, without blocking it."""
    barrier = threading.Barrier(SYNC_THREADS)
    loop = asyncio.get_running_loop()
    await asyncio.gather(*(loop.run_in_executor(sync_pool(), barrier.wait) for _ in range(SYNC_THREADS)))


@contextlib.contextmanager
def sync_threads_held() -> Iterator[None]:
    """Inside the block every sync thread is busy (a disk that lags): what is handed to them waits until the block
    ends, and then runs."""
    release = threading.Event()
    started = threading.Barrier(SYNC_THREADS + 1)

    def hold() -> None:
        started.wait()
        release.wait()

    blockers = [sync_pool().submit(hold) for _ in range(SYNC_THREADS)]
    started.wait()
    try:
        yield
    finally:
        release.set()
        for blocker in blockers:
            blocker.result()
