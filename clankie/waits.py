"""Bounded waits that never lose a cancellation.

On Python 3.11, ``asyncio.wait_for`` can swallow a cancellation: when the
awaited operation finishes in the same loop pass as the cancel arrives, it
returns the result and the ``CancelledError`` is gone (CPython gh-86296,
fixed in 3.12 by rebuilding ``wait_for`` on ``asyncio.timeout``). A task
cancelled that way runs on: the bridge's service link, cancelled just as its
connection came up, then waited for that connection to close forever, and the
bridge never stopped (seen on a cold, busy machine). :func:`within` bounds a
wait with ``asyncio.timeout`` instead, which delivers every cancellation.
:func:`set_within` waits for an event, or a while on an injected clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from clankie.clock import Clock

T = TypeVar("T")


async def within(aw: Awaitable[T], seconds: float | None) -> T:
    """``await aw``, or ``TimeoutError`` after ``seconds`` (None: no bound); a cancellation always propagates."""
    async with asyncio.timeout(seconds):
        return await aw


async def set_within(event: asyncio.Event, clock: Clock, seconds: float) -> bool:
    """Until ``event`` is set or ``seconds`` pass on ``clock`` (a fake one in tests), whichever comes first; whether
    it is set. Both waits are cancelled on the way out, a cancellation of this one included."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    nap = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait({waiter, nap}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        nap.cancel()
    return event.is_set()
