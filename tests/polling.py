"""One way for tests to wait on state that crosses a real process or socket boundary.

Three spellings of one rule (look, return the first truthy value, fail naming
what was awaited once ``timeout`` seconds have passed, never sleep a guessed
time):

* :func:`until` polls a plain predicate from a coroutine;
* :func:`until_probe` polls an async probe (a request, the next heartbeat);
* :func:`until_sync` polls from a test that runs outside an event loop
  (a supervisor in a subprocess, a blocking client).

``what`` is a description or a function giving one at the timeout, so the
failure can show the last state seen. ``nap`` replaces the sleep between two
looks with a wait that ends early when the state may have changed (a fake's
change event), bounded by ``step`` either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

What = str | Callable[[], str]
Nap = Callable[[float], Awaitable[object]]


def _timed_out(timeout: float, what: What) -> AssertionError:
    return AssertionError(f"timed out after {timeout:g}s waiting for {what() if callable(what) else what}")


async def until(
    pred: Callable[[], T | None], timeout: float = 10.0, what: What = "condition", step: float = 0.01, *,
    nap: Nap | None = None,
) -> T:
    """Poll real state until ``pred()`` is truthy and return that value; fail naming ``what`` after ``timeout`` s."""

    async def probe() -> T | None:
        return pred()

    return await until_probe(probe, timeout, what, step, nap=nap)


async def until_probe(
    probe: Callable[[], Awaitable[T | None]], timeout: float = 10.0, what: What = "condition", step: float = 0.01, *,
    nap: Nap | None = None,
) -> T:
    """:func:`until` for a probe that must be awaited (a look that is itself a request or a read)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if loop.time() > end:
            raise _timed_out(timeout, what)
        if nap is None:
            await asyncio.sleep(step)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(nap(step), step)


def until_sync(pred: Callable[[], T | None], timeout: float = 10.0, what: What = "condition", step: float = 0.02) -> T:
    """:func:`until` for a test outside an event loop: the same look, a blocking sleep between two."""
    end = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > end:
            raise _timed_out(timeout, what)
        time.sleep(step)
