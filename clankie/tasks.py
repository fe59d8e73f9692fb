"""A bounded set of background tasks: the one way a process starts, holds, counts and stops them.

The event loop keeps only a weak reference to a task, so a fire-and-forget
task nobody holds may be collected mid-run. A :class:`TaskSet` holds each
task it starts until the task ends, at most ``limit`` at once, and forgets it
as it ends. A task that ended with an exception is logged once, by the set's
name, the task's name and the exception's type: never its message, which may
carry a person's words or a secret. :meth:`TaskSet.aclose` cancels what is
left and waits for it; :meth:`TaskSet.join` waits without cancelling.

Not :class:`asyncio.TaskGroup`: a group cancels every sibling when one task
fails, which suits the parts of one job and not a server's independent
handlers, where one failing must leave the others running. A set can be used
again after :meth:`TaskSet.aclose` (a closed segment writer reopens on the
next write), so it has no closed state of its own.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

from clankie.errors import ClankieError

log = logging.getLogger(__name__)

T = TypeVar("T")

_EAGER: dict[str, bool] = {"eager_start": True} if sys.version_info >= (3, 12) else {}


class TaskSetFull(ClankieError):
    """Raised by :meth:`TaskSet.spawn` when the set already holds ``limit`` tasks; the coroutine is closed
    unrun. A caller for whom the bound is a normal event (a send that may be skipped) checks
    :attr:`TaskSet.full` first or catches this; one for whom it is not lets it propagate."""

    code = "task_set_full"

    def __init__(self, name: str, limit: int) -> None:
        super().__init__(f"{self.code}: {name} already holds {limit} tasks")
        self.name = name
        self.limit = limit


class TaskSet:
    """Background tasks held until they end: at most ``limit``, each failure logged without content."""

    def __init__(self, name: str, limit: int) -> None:
        if limit < 1:
            raise ValueError("a task set holds at least one task")
        self.name = name
        self.limit = limit
        self.failed = 0  # tasks that ended with an exception (each logged once)
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        """The tasks held now (a copy: the set may change while the caller looks)."""
        return iter(list(self._tasks))

    @property
    def full(self) -> bool:
        return len(self._tasks) >= self.limit

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str | None = None, eager: bool = False) -> asyncio.Task[T]:
        """Start ``coro`` as a task held until it ends; raises :class:`TaskSetFull` (``coro`` closed unrun) at the bound.

        ``eager``: on Python 3.12+ the task runs its first step inside this call, and one that ends there is
        never held (it needs no reference and must not count toward ``limit``).
        """
        if self.full:
            coro.close()
            raise TaskSetFull(self.name, self.limit)
        loop = asyncio.get_running_loop()
        if eager:
            task: asyncio.Task[T] = asyncio.Task(coro, loop=loop, name=name, **_EAGER)  # type: ignore[arg-type]  # eager_start exists only on 3.12+
        else:
            task = loop.create_task(coro, name=name)
        if task.done():
            self._report(task)
            return task
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def cancel(self) -> None:
        """Cancel every task held now, without waiting (from a callback that cannot await)."""
        for task in list(self._tasks):
            task.cancel()

    async def join(self, timeout: float | None = None) -> None:
        """Wait until every task held now has ended (at most ``timeout`` s), cancelling none."""
        pending = list(self._tasks)
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    async def aclose(self, timeout: float | None = None) -> None:
        """Cancel every task held now and wait until they have ended (at most ``timeout`` s)."""
        self.cancel()
        await self.join(timeout)

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        self._report(task)

    def _report(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()  # retrieved here, so asyncio never logs it again at collection
        if exc is not None:
            self.failed += 1
            log.error("%s: task %s failed with %s", self.name, task.get_name(), type(exc).__name__)
