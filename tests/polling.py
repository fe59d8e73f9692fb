"""One way for tests to wait on state that crosses a real process or socket boundary."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def until(pred: Callable[[], T | None], timeout: float = 10.0, what: str = "condition", step: float = 0.01) -> T:
    """Poll real state until ``pred()`` is truthy and return that value; fail naming ``what`` after ``timeout`` s."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        value = pred()
        if value:
            return value
        if loop.time() > end:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(step)
