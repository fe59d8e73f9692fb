"""Who may hold a connection to a listening socket: the pure admission rules behind :class:`clankie.ipc.Server`.

Four limits keep a slow, idle or hostile local client from starving the
operator (docs/operations.md, "Security model"):

* a **hello deadline**: a peer that has not said ``hello`` within
  ``hello_timeout`` seconds is dropped;
* an optional **idle timeout**: a connection with nothing in flight and
  nothing received for ``idle_timeout`` seconds is closed (``control.sock``;
  the tree's own long-lived links have none);
* **per-peer caps**: at most ``per_pid`` connections from one process and,
  for a uid other than root, at most ``max_connections - root_reserve``, so
  the last ``root_reserve`` slots are only ever root's (``sudo clankiectl``
  gets through whatever the service's uid holds);
* a **per-connection in-flight cap**: at most ``max_inflight`` handlers run
  for one connection at once; past it a request is answered
  ``too_many_requests`` and a notification is dropped, both counted
  (:class:`clankie.connection.Connection`);
* optional **idle eviction**: when a cap is reached, the connection that has
  been idle longest (nothing in flight) is closed to make room, so idle
  connections cannot lock the operator out even when everyone runs as one uid.

:func:`decide` is pure: it takes the open connections as data and returns
what to do; the socket shell carries it out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_MAX_INFLIGHT = 1024
"""Handlers one connection may run at once (:data:`clankie.connection.DEFAULT_MAX_INFLIGHT` is this)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The defaults suit the tree's own sockets (service, hosts); ``control.sock`` is stricter (settings)."""

    max_connections: int = 128
    per_pid: int = 128
    root_reserve: int = 8
    hello_timeout: float = 5.0
    idle_timeout: float | None = None
    evict_idle: bool = False
    max_inflight: int = DEFAULT_MAX_INFLIGHT

    def __post_init__(self) -> None:
        if not 0 <= self.root_reserve < self.max_connections or self.per_pid < 1 or self.max_inflight < 1:
            raise ValueError("limits need 0 <= root_reserve < max_connections, per_pid >= 1 and max_inflight >= 1")

    @classmethod
    def capped(cls, max_connections: int, **kwargs: float | int | bool | None) -> Limits:
        """Limits for ``max_connections`` with a proportionate root reserve (an eighth, at least one)."""
        reserve = max(1, max_connections // 8) if max_connections > 1 else 0
        return cls(max_connections=max_connections, root_reserve=reserve, **kwargs)  # type: ignore[arg-type]  # the other dataclass fields, passed through by name

    @property
    def per_uid(self) -> int:
        """Connections one non-root uid may hold."""
        return self.max_connections - self.root_reserve


@dataclass(frozen=True, slots=True)
class Held:
    """One open connection, as the rules see it."""

    key: int  # the shell's handle for it
    pid: int
    uid: int
    busy: bool  # a request or reply in flight
    idle_since: float  # when it last received or answered something


@dataclass(frozen=True, slots=True)
class Admit:
    evict: int | None = None  # the key of a connection to close first, if any


@dataclass(frozen=True, slots=True)
class Refuse:
    reason: str


def decide(limits: Limits, pid: int, uid: int, held: Sequence[Held]) -> Admit | Refuse:
    """Admit a new peer ``(pid, uid)``, possibly by evicting the idlest connection, or refuse it."""
    if sum(1 for h in held if h.pid == pid and pid != 0) >= limits.per_pid:
        return Refuse(f"pid {pid} already holds {limits.per_pid} connections")
    if uid != 0:
        mine = [h for h in held if h.uid == uid]
        if len(mine) >= limits.per_uid:
            return _evict(limits, mine, f"uid {uid} already holds {limits.per_uid} connections")
    if len(held) >= limits.max_connections:
        others = [h for h in held if h.uid != 0] or list(held)  # root's own connections go last
        return _evict(limits, others, f"{len(held)} connections already open")
    return Admit()


def _evict(limits: Limits, pool: Sequence[Held], reason: str) -> Admit | Refuse:
    idle = [h for h in pool if not h.busy]
    if not limits.evict_idle or not idle:
        return Refuse(reason)
    return Admit(evict=min(idle, key=lambda h: h.idle_since).key)
