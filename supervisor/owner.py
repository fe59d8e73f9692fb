"""What a child slot needs of the tree that owns it, and what a spare needs of its child.

:mod:`supervisor.process` and :mod:`supervisor.spare` depend on these
protocols, and :class:`supervisor.tree.Tree` and
:class:`supervisor.process.Child` implement them, so no module of the
supervisor imports one that imports it back (``tests/supervisor/test_imports.py``).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Protocol

from clankie.clock import Clock
from clankie.settings import Settings
from supervisor.forward import StderrQueue
from supervisor.lifecycle import Lifecycle
from supervisor.spawn import LinkHandler, Proc
from supervisor.spec import ChildSpec
from supervisor.watchdog import Liveness


class SpareSlot(Protocol):
    """A child's spare slot, as the tree sees it."""

    def want(self, delay: float) -> None: ...


class Owner(Protocol):
    """The tree, as one of its children sees it."""

    clock: Clock
    settings: Settings
    handover: bool
    log_dir: Path
    log_max_bytes: int
    log_backups: int
    child_env: dict[str, str]
    full_env: dict[str, str]
    stderr: StderrQueue | None
    native_journal: bool  # children write native journal entries; their stderr is not forwarded

    @property
    def stopping(self) -> bool: ...  # the tree's ordered stop has begun: nothing starts any more

    def changed(self) -> None: ...

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]: ...

    def reap(self) -> None: ...

    def listeners_for(self, spec: ChildSpec) -> dict[str, socket.socket]: ...

    def want_spare(self, spare: SpareSlot) -> None: ...


class SpareOwner(Protocol):
    """A child, as its warm spare sees it."""

    name: str
    spec: ChildSpec
    tree: Owner
    clock: Clock
    life: Lifecycle
    liveness: Liveness

    def spawn_proc(self, on_link: LinkHandler, *, spare: bool = False) -> Proc: ...
