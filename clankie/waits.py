"""Bounded waits that never lose a cancellation.

On Python 3.11, ``asyncio.wait_for`` can swallow a cancellation: when the
awaited operation finishes in the same loop pass as the cancel arrives, it
returns the result and the ``CancelledError`` is gone (CPython gh-86296,
fixed in 3.12 by rebuilding ``wait_for`` on ``asyncio.timeout``). A task
cancelled that way runs on: the bridge's service link, cancelled just as its
connection came up, then waited for that connection to close forever, and the
bridge never stopped (seen on a cold, busy machine). :func:`within` bounds a
wait with ``asyncio.timeout`` instead, which delivers every cancellation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(aw: Awaitable[T], seconds: float | None) -> T:
    """``await aw``, or ``TimeoutError`` after ``seconds`` (None: no bound); a cancellation always propagates."""
    async with asyncio.timeout(seconds):
        return await aw
