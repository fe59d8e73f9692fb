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
import errno
import logging
import os
import select
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

SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)
"""``getsockopt`` option for a pidfd of the peer (Linux 6.5; Python 3.11 does not name it; 77 on every arch)."""


def parent_pid(pid: int) -> int | None:
    """``pid``'s parent from ``/proc/<pid>/stat`` (after the command name, which may hold anything), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    try:
        return int(stat.rsplit(b")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return None


class PidfdLineage:
    """The kernel's processes: a handle is a pidfd; its parent is read from ``/proc``."""

    def __init__(self) -> None:
        self._pids: dict[int, int] = {}

    def adopt(self, pidfd: int, pid: int) -> int:
        """Take a pidfd opened elsewhere (the peer's, from its socket) as a handle on ``pid``."""
        self._pids[pidfd] = pid
        return pidfd

    def pid(self, handle: int) -> int:
        return self._pids[handle]

    def parent(self, handle: int) -> int | None:
        return parent_pid(self._pids[handle])

    def alive(self, handle: int) -> bool:
        poll = select.poll()
        poll.register(handle, select.POLLIN)
        return not poll.poll(0)  # a pidfd turns readable when its process exits

    def open(self, pid: int) -> int | None:
        try:
            return self.adopt(os.pidfd_open(pid), pid)
        except OSError:  # ESRCH: no such process now
            return None

    def close(self, handle: int) -> None:
        self._pids.pop(handle, None)
        os.close(handle)


def peer_pidfd(sock: socket.socket, pid: int) -> int | None:
    """A pidfd of the process that connected ``sock`` (``SO_PEERPIDFD``; ``pidfd_open(pid)`` on a kernel without
    it), or None when there is none to be had (the peer is gone; or, on such a kernel, has no pid we can see)."""
    try:
        return int(sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD))
    except OSError as exc:
        if exc.errno not in (errno.ENOPROTOOPT, errno.EOPNOTSUPP):  # EINVAL, ESRCH: the peer is gone
            return None
    if pid <= 0:
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def no_new_privs(status: str = "/proc/self/status") -> bool:
    """Whether this process (and so every process it starts) can never gain privileges by ``execve``."""
    try:
        with open(status, encoding="ascii", errors="replace") as fh:
            return any(line.split() == ["NoNewPrivs:", "1"] for line in fh)
    except OSError:
        return False


def outside_the_tree(sock: socket.socket, pid: int, uid: int) -> peers.Refusal | None:
    """``control.sock``'s check beyond the uid rule: the peer must be *proven* not to be this supervisor's
    descendant (:mod:`supervisor.provenance`); one that cannot be (gone, unreadable) is refused ``peer_unproven``."""
    me = os.getpid()
    if pid == me:
        return None
    pidfd = peer_pidfd(sock, pid)
    if pidfd is None:
        return peers.Refusal(Code.PEER_UNPROVEN, f"pid {pid} is gone: a control client must still be there to be "
                                                 "proven outside the tree")
    lineage = PidfdLineage()
    try:
        if pid == 0:  # our pid namespace has no name for it: it lives in one above ours, where no child of ours goes
            verdict = provenance.beyond_our_namespace(alive=lineage.alive(pidfd))
        else:
            verdict = provenance.locate(lineage.adopt(pidfd, pid), me, lineage)
        standing = provenance.Standing(uid=uid, our_uid=os.getuid(), no_new_privs=no_new_privs(),
                                       alive=lineage.alive(pidfd))
    finally:
        lineage.close(pidfd)
    if provenance.admitted(verdict, standing):
        return None
    if verdict.where is provenance.Where.INSIDE:
        return peers.Refusal(Code.PEER_IN_TREE, f"pid {pid} runs inside the tree; control.sock serves the operator")
    return peers.Refusal(Code.PEER_UNPROVEN, f"pid {pid} cannot be proven outside the tree ({verdict.why})")


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
