"""Who may dial which socket: the supervisor's half of :mod:`clankie.peers`, and ``control.sock``'s own rule.

The supervisor is the one that knows which pid is the bridge and which the
service (it spawned them). Whenever the tree changes (a process spawned, a
spare parked or taken, a process gone) and whenever a process links, every
linked process of a child that serves a socket gets its list, once per
change: ``service`` the bridge's pid, the hosts the service's and its
spare's. The bridge is spawned with its pid known at once and is heard of
by the service long before it can have imported anything and dialled.

``control.sock`` serves the operator: root or the supervisor's own uid (the
uid rule of :mod:`clankie.ipc`), and never a process of the tree itself
(:func:`outside_the_tree`): not a child, not Chromium, Node or a tool's
``bash`` below one. The supervisor is a child subreaper, so a process that
double-forks out of a child is re-parented to the supervisor and is still
in the tree.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable

from clankie import ipc, peers
from clankie.errors import ChannelBroken, ChannelClosed
from clankie.protocol import Code, Peers
from supervisor.owner import Owner
from supervisor.process import Child
from supervisor.spawn import Proc

log = logging.getLogger(__name__)

MAX_DEPTH = 4096
"""Ancestors walked at most (a chain longer than any real process tree ends the walk: refused)."""


def descends_from(pid: int, root: int, parent_of: Callable[[int], int | None]) -> bool:
    """Whether ``pid`` is ``root`` or below it, walking ``parent_of`` (None: the process is gone)."""
    for _ in range(MAX_DEPTH):
        if pid == root:
            return True
        parent = parent_of(pid)
        if parent is None or parent <= 1:
            return False
        pid = parent
    return True


def parent_pid(pid: int) -> int | None:
    """``pid``'s parent from ``/proc/<pid>/stat`` (after the command name, which may hold anything), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    return int(stat.rsplit(b")", 1)[1].split()[1])


def outside_the_tree(pid: int, uid: int) -> peers.Refusal | None:
    """``control.sock``'s check beyond the uid rule: the peer must not be this supervisor's descendant."""
    if pid != os.getpid() and descends_from(pid, os.getpid(), parent_pid):
        return peers.Refusal(Code.PEER_IN_TREE, f"pid {pid} runs inside the tree; control.sock serves the operator")
    return None


class Announcer:
    """Sends ``peers`` to each linked process whose list changed since it last heard one."""

    def __init__(self, owner: Owner) -> None:
        self._owner = owner
        self._told: dict[int, tuple[ipc.Connection, tuple[int, ...]]] = {}  # id(link) -> (link, the list it last heard)

    def announce(self, children: Iterable[Child]) -> None:
        every = list(children)
        pids = {c.name: [p.pid for p in _procs(c) if p.pid is not None] for c in every}
        told: dict[int, tuple[ipc.Connection, tuple[int, ...]]] = {}
        for child in every:
            allowed = peers.allowed(child.name, pids)
            if allowed is None:
                continue
            for proc in _procs(child):
                link = proc.link
                if link is None or link.closed:
                    continue
                told[id(link)] = (link, allowed)
                heard = self._told.get(id(link))
                if heard is None or heard[0] is not link or heard[1] != allowed:  # the object, not a reused id
                    log.debug("telling %s pid %s its peers: %s", child.name, proc.pid, allowed)
                    self._owner.spawn(_tell(link, allowed), name=f"peers-{child.name}")
        self._told = told


def _procs(child: Child) -> list[Proc]:
    spare = child.spare.proc
    return [p for p in (child.proc, spare) if p is not None]


async def _tell(link: ipc.Connection, allowed: tuple[int, ...]) -> None:
    with contextlib.suppress(ChannelBroken, ChannelClosed):
        await link.notify("peers", Peers(pids=allowed))
