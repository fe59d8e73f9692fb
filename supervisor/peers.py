"""Who may dial which socket: the supervisor's half of :mod:`clankie.peers`, and ``control.sock``'s own rule.

The supervisor is the one that knows which pid is the bridge and which the
service (it spawned them). Whenever the tree changes (a process spawned, a
spare parked or taken, a process gone) and whenever a process links, every
linked process of a child that serves a socket gets its list, once per
change: ``service`` the bridge's pid, the hosts the service's and its
spare's. The bridge is spawned with its pid known at once and is heard of
by the service long before it can have imported anything and dialled.

``control.sock`` serves the operator: root or the supervisor's own uid (the
uid rule of :mod:`clankie.ipc`), and only a process *proven* outside the
tree (:func:`outside_the_tree`, :mod:`supervisor.provenance`): not a child,
not Chromium, Node or a tool's ``bash`` below one, and not a process that is
gone before it could be checked. The supervisor is a child subreaper, so a
process that double-forks out of a child is re-parented to the supervisor and
is still in the tree.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterable

from clankie import ipc, peers
from clankie.errors import ChannelBroken, ChannelClosed
from clankie.protocol import Code, Peers
from supervisor import provenance
from supervisor.owner import Owner
from supervisor.process import Child
from supervisor.spawn import Proc

log = logging.getLogger(__name__)

def outside_the_tree(sock: socket.socket, pid: int, uid: int) -> peers.Refusal | None:
    """``control.sock``'s check beyond the uid rule: the peer must be *proven* not to be this supervisor's
    descendant (:mod:`supervisor.provenance`); one that cannot be (gone, unreadable) is refused ``peer_unproven``."""
    me = os.getpid()
    if pid == me:
        return None
    pidfd = provenance.peer_pidfd(sock, pid)
    if pidfd is None:
        return peers.Refusal(Code.PEER_UNPROVEN, f"pid {pid} is gone: a control client must still be there to be "
                                                 "proven outside the tree")
    lineage = provenance.PidfdLineage()
    try:
        verdict = provenance.locate(lineage.adopt(pidfd, pid), me, lineage)
        if verdict.where is provenance.Where.UNPROVEN and other_uid_outside(uid) and lineage.alive(pidfd):
            return None  # root's live process, hidden by ProtectProc=invisible: no process of ours can be root
    finally:
        lineage.close(pidfd)
    if verdict.where is provenance.Where.OUTSIDE:
        return None
    if verdict.where is provenance.Where.INSIDE:
        return peers.Refusal(Code.PEER_IN_TREE, f"pid {pid} runs inside the tree; control.sock serves the operator")
    return peers.Refusal(Code.PEER_UNPROVEN, f"pid {pid} cannot be proven outside the tree ({verdict.why})")


def other_uid_outside(uid: int) -> bool:
    """Whether a peer of ``uid`` cannot be a process of this tree whatever its chain: root, while this supervisor is
    not root and has ``no_new_privs`` (so no process it starts can ever become root)."""
    return uid == 0 and os.getuid() != 0 and provenance.no_new_privs()


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
