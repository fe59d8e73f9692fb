"""Whether a ``control.sock`` peer is provably outside the tree: the walk over its parent chain, a pure core.

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

:func:`locate` is the walk, pure over a :class:`Lineage` (no I/O here; the
kernel's, with pidfds, is :class:`supervisor.peers.PidfdLineage`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

MAX_DEPTH = 4096
"""Ancestors walked at most (a chain longer than any real process tree is not proven outside: refused)."""


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


def beyond_our_namespace(*, alive: bool) -> Verdict:
    """A peer whose pid our pid namespace cannot name (``SO_PEERCRED`` says 0): it lives in a namespace above ours
    (an operator on the host of a containerised tree), where no process of ours can go (``setns`` only enters a
    namespace below one's own). Outside while it lives; gone, it is not proven anything."""
    if alive:
        return Verdict(Where.OUTSIDE, "a live process of a pid namespace above ours")
    return Verdict(Where.UNPROVEN, "a gone process of a pid namespace above ours")


@dataclass(frozen=True, slots=True)
class Standing:
    """What is known of a peer beyond its walk: its uid, ours, whether we have ``no_new_privs``, whether it lives."""

    uid: int
    our_uid: int
    no_new_privs: bool
    alive: bool


def admitted(verdict: Verdict, standing: Standing) -> bool:
    """Whether ``control.sock`` lets the peer in: proven outside by its walk; or, not proven either way, a live root
    peer of a non-root supervisor with ``no_new_privs`` (no process it starts can ever become root; under the unit
    root's ``/proc`` is hidden from it, ``ProtectProc=invisible``). Inside, or gone, it never is."""
    if verdict.where is Where.OUTSIDE:
        return True
    if verdict.where is Where.INSIDE:
        return False
    return standing.alive and standing.uid == 0 and standing.our_uid != 0 and standing.no_new_privs

