"""Who may connect to the socket a child serves: the processes the supervisor names, by pid (issue 24 item 5).

Every listening socket first checks the peer's uid with ``SO_PEERCRED``
(ours or root, :func:`clankie.ipc.peer_allowed`). Under a supervisor that is
not enough: every process of the tree shares that uid, and so does whatever
they start (``bash`` in a tool, Node, a renderer that escaped). So the
supervisor, which spawned every child and knows its pid, names the processes
each socket serves (:data:`SERVES`): ``service.sock`` the bridge;
``browser.sock`` and ``tldraw.sock`` the service (and the service's warm
spare, so a take-over is not refused for the instant before the next word).
It sends each child its list over the link (``peers``) whenever a pid changes,
and a child that has a supervisor refuses everyone until the first list comes.
A process started by hand (a test, a developer's shell) has nobody to name
its peers and keeps the uid rule alone.

A refused peer gets its hello answered with ``peer_not_allowed`` and the
connection closed; the server counts refusals by code. The check reads the
pid the kernel recorded at ``connect()``, so a client cannot claim another's;
a pid reused after its process died could be let in until the supervisor's
next list, which follows the death at once.

:func:`allowed` is pure: the supervisor's shell feeds it the pids it holds.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from clankie.protocol import Code

SERVES: dict[str, tuple[str, ...]] = {"service": ("bridge",), "browser": ("service",), "tldraw": ("service",)}
"""For each child that serves a socket, the children whose processes may dial it."""


@dataclass(frozen=True, slots=True)
class Refusal:
    code: str
    reason: str


def allowed(name: str, pids: Mapping[str, Collection[int]]) -> tuple[int, ...] | None:
    """The pids that may dial ``name``'s socket, given every child's live pids (its process and its spare's); None
    for a child that serves no socket of the tree."""
    callers = SERVES.get(name)
    if callers is None:
        return None
    return tuple(sorted({pid for caller in callers for pid in pids.get(caller, ())}))


class HandedPeers:
    """This process's view of the list the supervisor sent (None: nobody sends one, the uid rule alone)."""

    def __init__(self) -> None:
        self.pids: frozenset[int] | None = None

    def expect(self) -> None:
        """A supervisor will name the peers: refuse everyone until it does."""
        if self.pids is None:
            self.pids = frozenset()

    def allow(self, pids: Iterable[int]) -> None:
        self.pids = frozenset(pids)

    def admit(self, pid: int, uid: int) -> Refusal | None:
        """None to let ``pid`` in, else why not (its uid has passed the uid rule already)."""
        if self.pids is None or pid in self.pids:
            return None
        if not self.pids:
            return Refusal(Code.PEER_NOT_ALLOWED, f"pid {pid}: the supervisor has named no client of this socket yet")
        return Refusal(Code.PEER_NOT_ALLOWED, f"pid {pid} is not the process the supervisor named for this socket")


HANDED = HandedPeers()
"""The one list of this process: the link fills it (:mod:`clankie.link`), the child's server reads it."""
