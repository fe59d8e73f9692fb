"""The tree's own state: a pure, table-driven state machine (no I/O, no clock).

:class:`supervisor.tree.Tree` moves it through :func:`move` and nowhere
else; ``clankiectl status`` shows it, and :attr:`Tree.stopping` is read
from it (a stopping tree starts nothing).
"""

from __future__ import annotations

import enum

from clankie.errors import LocalProtocolError

STOP_BUDGET = 25.0
"""Seconds the whole ordered stop (``STOPPING``) may take; the unit's TimeoutStopSec must be above it, and
``clankiectl start|stop|restart`` wait this long for the children by default (here, in a leaf, so the CLI need not
import the supervisor to know it)."""


class TreeState(enum.Enum):
    STARTING = "starting"  # binding the sockets and the metrics endpoint; no child started yet
    RUNNING = "running"  # every child asked to start; supervising
    STOPPING = "stopping"  # the ordered stop: children go in reverse order, nothing starts
    STOPPED = "stopped"  # every child gone, the sockets removed


class TreeEvent(enum.Enum):
    RUN = "run"  # the tree starts its children
    STOP = "stop"  # the ordered stop begins (the first SIGTERM/SIGINT, `clankiectl shutdown`, or the caller's event)
    DONE = "done"  # the stop finished


class TreeStateError(LocalProtocolError):
    """Raised when the tree makes a move its table does not list: a bug on our side. The state stays."""


_T = TreeState
TREE_TRANSITIONS: dict[tuple[TreeState, TreeEvent], TreeState] = {
    (_T.STARTING, TreeEvent.RUN): _T.RUNNING,
    (_T.RUNNING, TreeEvent.STOP): _T.STOPPING,
    (_T.STOPPING, TreeEvent.DONE): _T.STOPPED,
}
"""Every legal (state, event) pair of the tree; anything else is a bug and raises."""


def move(state: TreeState, event: TreeEvent) -> TreeState:
    """The state one row of :data:`TREE_TRANSITIONS` leads to from ``state`` on ``event``."""
    target = TREE_TRANSITIONS.get((state, event))
    if target is None:
        raise TreeStateError(f"tree {event.value} is not valid in state {state.value}")
    return target
