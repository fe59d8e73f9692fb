"""Whether a ``control.sock`` peer is provably outside the tree: the walk (pure) and the kernel's pidfds it walks.

``control.sock`` serves the operator, never a process of the tree (a child,
Chromium, Node, a tool's ``bash``, an orphan of one, which the subreaper
supervisor inherits). The question is asked of the process that called
``connect()``, and it **fails closed**: a peer is let in only when its whole
parent chain was read, link by link, and reached init without meeting the
supervisor. A process that is gone (it connected and exited, the probe of
issue 37), whose ``/proc`` cannot be read, or whose chain changed while it was
read, is not proven outside, so it is refused.

Each link is read through a handle on the process itself (a pidfd), never
through a pid alone, so a pid reused by another process cannot answer for the
one that connected:

1. the peer's handle comes from the socket (``SO_PEERPIDFD``, Linux 6.5: the
   very process that connected, even if its pid was reused since; on an older
   kernel ``pidfd_open`` of its pid, which a pid reused between the
   ``connect()`` and the accept could still fool);
2. its parent's pid is read from ``/proc``, and the process is checked to be
   alive *after* the read (so the read was of that process, not of a later one
   with its pid);
3. a handle on the parent is opened, and the child is read again: the same
   parent and still alive means the parent did not exit in between (its exit
   re-parents the child at once), so the handle is on the real parent.

:func:`locate` is the walk, pure over a :class:`Lineage`; :class:`PidfdLineage`
is the kernel's.
"""

from __future__ import annotations

import enum
import errno
import os
import select
import socket
from dataclasses import dataclass
from typing import Protocol

MAX_DEPTH = 4096
"""Ancestors walked at most (a chain longer than any real process tree is not proven outside: refused)."""

SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)
"""``getsockopt`` option for a pidfd of the peer (Linux 6.5; Python 3.11 does not name it; 77 on every arch)."""


class Where(enum.Enum):
    INSIDE = "inside"  # a descendant of the root (the supervisor), or the root itself
    OUTSIDE = "outside"  # the chain was read whole and reached init without meeting the root
    UNPROVEN = "unproven"  # gone, unreadable, moved while read, or too deep: not let in


@dataclass(frozen=True, slots=True)
class Verdict:
    where: Where
    why: str


class Lineage(Protocol):
    """Processes as handles (a pidfd in the kernel's; anything in a test's)."""

    def pid(self, handle: int) -> int:
        """The pid the process had when the handle was opened."""
        ...

    def parent(self, handle: int) -> int | None:
        """Its parent's pid as ``/proc`` says it now; None when it cannot be read (gone, hidden)."""
        ...

    def alive(self, handle: int) -> bool:
        """Whether the process has not exited (a zombie has)."""
        ...

    def open(self, pid: int) -> int | None:
        """A handle on the process that has ``pid`` now; None when there is none."""
        ...

    def close(self, handle: int) -> None: ...


def locate(peer: int, root: int, lineage: Lineage, max_depth: int = MAX_DEPTH) -> Verdict:
    """Where the process behind the handle ``peer`` is with respect to the process ``root`` (the caller's handle
    ``peer`` is not closed; the handles the walk opens are)."""
    opened: list[int] = []
    try:
        handle = peer
        for _ in range(max_depth):
            pid = lineage.pid(handle)
            if pid == root:
                return Verdict(Where.INSIDE, f"pid {pid} is the supervisor")
            parent = lineage.parent(handle)
            if parent is None or not lineage.alive(handle):
                return Verdict(Where.UNPROVEN, f"pid {pid} is gone or unreadable")
            if parent == root:
                return Verdict(Where.INSIDE, f"pid {pid} is a child of the supervisor")
            if parent <= 1:  # init, or a parent outside our pid namespace: the chain ended without the root
                return Verdict(Where.OUTSIDE, f"pid {pid}'s chain reached init")
            up = lineage.open(parent)
            if up is None:
                return Verdict(Where.UNPROVEN, f"pid {pid}'s parent {parent} is gone")
            opened.append(up)
            if lineage.parent(handle) != parent or not lineage.alive(handle):  # the parent exited in between
                return Verdict(Where.UNPROVEN, f"pid {pid}'s parent {parent} changed while it was read")
            handle = up
        return Verdict(Where.UNPROVEN, f"a chain deeper than {max_depth}")
    finally:
        for handle in opened:
            lineage.close(handle)


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
    it), or None when there is none to be had (the peer is gone, or has no pid we can see)."""
    if pid <= 0:
        return None
    try:
        return int(sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD))
    except OSError as exc:
        if exc.errno not in (errno.ENOPROTOOPT, errno.EOPNOTSUPP):  # EINVAL, ESRCH: the peer is gone
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
