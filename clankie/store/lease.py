"""A tree's view of one shard's lease, as a table-driven state machine (pure).

The database decides who holds a lease (:mod:`clankie.store.leases`); this core decides what the holder *believes*,
and when it must stop believing it. It takes ``now`` from the shell's monotonic clock (``CLOCK_BOOTTIME`` in
production, so time spent suspended counts) and never reads a clock itself.

The rule that makes a paused or cut-off holder safe: the **local deadline** is the start of the last successful
acquire or renew + TTL − :data:`LEASE_MARGIN`. The database computed its expiry as *its*
``now()`` + TTL, read after that start, so the local deadline always falls before the database lets another tree in
(``docs/multi-machine.md``, "The lease arithmetic"). When the deadline passes without a renew, the holder reports
the lease lost (:attr:`Kind.STOP_SERVING`) even if the database never answered.

Who may take a lease row is :func:`decide`'s rule (the shell reads the row locked and writes what it says): a tree
takes its preferred shards when free or expired, claims one another tree serves for it, and with
``CLANKIE_DISCORD_SHARD_TAKEOVER=any`` takes any other shard that is free or expired and not claimed.

Every move of the believed state goes through :data:`TRANSITIONS`; the pairs in :data:`IGNORED` are late answers to a call the deadline
already cut off (no move, no action); any other pair raises :class:`LeaseStateError` and leaves the state as it was.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

LEASE_MARGIN = 1.0
"""Seconds a holder gives up its lease before the database would let it expire (docs/multi-machine.md, "The lease
arithmetic"): its local deadline is the start of its last successful renew + TTL − this."""


class LeaseState(enum.Enum):
    """What this tree believes about one shard's lease."""

    UNHELD = "unheld"  # not ours (free, or another tree's)
    ACQUIRING = "acquiring"  # an acquire is in flight
    HELD = "held"  # ours at :attr:`Lease.epoch`, until :attr:`Lease.deadline`
    RENEWING = "renewing"  # ours, a renew in flight
    RELEASING = "releasing"  # given up, the release in flight
    LOST = "lost"  # was ours; the deadline passed or the epoch moved on
    RELEASED = "released"  # given up on purpose


class LeaseEvent(enum.Enum):
    """What the shell tells the core."""

    WANT = "want"  # try to take the lease (the shell's choice: a preferred shard, or takeover of an expired one)
    GRANTED = "granted"  # the acquire succeeded, with an epoch
    TAKEN = "taken"  # the acquire was refused: another tree holds an unexpired lease
    FAILED = "failed"  # the database call failed (an error or a timeout)
    RENEW_DUE = "renew_due"  # the renew period has passed (see :meth:`Lease.due`)
    RENEWED = "renewed"  # the renew succeeded
    REFUSED = "refused"  # the renew was refused: the lease expired or another tree took it
    DEADLINE = "deadline"  # the local deadline passed without a successful renew
    RELEASE = "release"  # the shell gives the shard up (handback, stop)
    FREED = "freed"  # the release was done


class Kind(enum.Enum):
    """What the shell must do."""

    ACQUIRE = "acquire"
    RENEW = "renew"
    RELEASE = "release"
    SERVE = "serve"  # the shard is ours at this epoch: open its gateway session, write with this epoch
    STOP_SERVING = "stop_serving"  # not ours any more: close its gateway session, drop its lanes, write nothing


@dataclass(frozen=True, slots=True)
class Action:
    """One thing for the shell to do; ``epoch`` is the lease's epoch it concerns (0 for an acquire)."""

    kind: Kind
    epoch: int = 0
    reason: str = ""


class LeaseStateError(Exception):
    """Raised when an event is fed in a state that has no such move: a bug in the shell. The state is unchanged."""


S, E = LeaseState, LeaseEvent
TRANSITIONS: dict[tuple[LeaseState, LeaseEvent], LeaseState] = {
    (S.UNHELD, E.WANT): S.ACQUIRING,
    (S.LOST, E.WANT): S.ACQUIRING,
    (S.RELEASED, E.WANT): S.ACQUIRING,
    (S.ACQUIRING, E.GRANTED): S.HELD,
    (S.ACQUIRING, E.TAKEN): S.UNHELD,
    (S.ACQUIRING, E.FAILED): S.UNHELD,
    (S.HELD, E.RENEW_DUE): S.RENEWING,
    (S.RENEWING, E.RENEWED): S.HELD,
    (S.RENEWING, E.FAILED): S.HELD,  # try again at the next period; the deadline has not moved
    (S.RENEWING, E.REFUSED): S.LOST,
    (S.HELD, E.DEADLINE): S.LOST,
    (S.RENEWING, E.DEADLINE): S.LOST,
    (S.HELD, E.RELEASE): S.RELEASING,
    (S.RENEWING, E.RELEASE): S.RELEASING,
    (S.RELEASING, E.FREED): S.RELEASED,
    (S.RELEASING, E.FAILED): S.RELEASED,  # not freed: it expires by itself at the TTL
}
IGNORED: frozenset[tuple[LeaseState, LeaseEvent]] = frozenset({
    (S.LOST, E.RENEWED),  # a renew the deadline cut off answered after all: the lease is still given up
    (S.LOST, E.REFUSED),
    (S.LOST, E.FAILED),
})
del S, E


class Lease:
    """One shard's lease as this tree sees it; :meth:`handle` is the only way it moves."""

    def __init__(self, *, renew: float, ttl: float, margin: float = LEASE_MARGIN) -> None:
        if ttl - margin < renew:
            raise ValueError("the local window (ttl - margin) must hold at least one renew period")
        self.renew, self.ttl, self.margin = renew, ttl, margin
        self.state = LeaseState.UNHELD
        self.epoch = 0
        self.deadline = float("-inf")  # held until this (local clock)
        self.next_renew = float("inf")
        self._started = float("-inf")  # when the call in flight started

    def handle(self, event: LeaseEvent, now: float, epoch: int = 0) -> list[Action]:
        """Feed one event at ``now``; returns what the shell must do. ``epoch`` comes with :attr:`LeaseEvent.GRANTED`."""
        key = (self.state, event)
        if key in IGNORED:
            return []
        target = TRANSITIONS.get(key)
        if target is None:
            raise LeaseStateError(f"{event.value} in {self.state.value}")
        if event is LeaseEvent.GRANTED and epoch < 1:
            raise LeaseStateError("a granted lease has an epoch of at least 1")
        actions = self._actions(event, now, epoch)
        self.state = target
        return actions

    def _actions(self, event: LeaseEvent, now: float, epoch: int) -> list[Action]:
        E = LeaseEvent
        if event is E.WANT:
            self._started = now
            return [Action(Kind.ACQUIRE)]
        if event is E.GRANTED:
            self.epoch = epoch
            self._held_from(self._started)
            return [Action(Kind.SERVE, epoch)]
        if event is E.RENEW_DUE:
            self._started = now
            return [Action(Kind.RENEW, self.epoch)]
        if event is E.RENEWED:
            self._held_from(self._started)
            return []
        if event is E.FAILED and self.state is LeaseState.RENEWING:
            self.next_renew = now + self.renew
            return []
        if event in (E.REFUSED, E.DEADLINE):
            reason = "taken" if event is E.REFUSED else "deadline"
            return [Action(Kind.STOP_SERVING, self.epoch, reason)]
        if event is E.RELEASE:
            return [Action(Kind.STOP_SERVING, self.epoch, "released"), Action(Kind.RELEASE, self.epoch)]
        return []  # TAKEN, FAILED while acquiring or releasing, FREED: nothing to do

    def _held_from(self, started: float) -> None:
        self.deadline = started + self.ttl - self.margin
        self.next_renew = started + self.renew

    def due(self, now: float) -> LeaseEvent | None:
        """The event time brings at ``now``, if any: the deadline first, then the renew period."""
        if self.state in (LeaseState.HELD, LeaseState.RENEWING) and now >= self.deadline:
            return LeaseEvent.DEADLINE
        if self.state is LeaseState.HELD and now >= self.next_renew:
            return LeaseEvent.RENEW_DUE
        return None

    def wake_at(self) -> float | None:
        """When :meth:`due` next has something to say (None: nothing on the clock)."""
        if self.state is LeaseState.HELD:
            return min(self.deadline, self.next_renew)
        if self.state is LeaseState.RENEWING:
            return self.deadline
        return None

    @property
    def serving(self) -> bool:
        """Whether the shard is ours to serve now (held, or held with a renew in flight)."""
        return self.state in (LeaseState.HELD, LeaseState.RENEWING)


class Want(enum.Enum):
    """What a lease keeper may do with a shard (docs/multi-machine.md, "Takeover and handback")."""

    PREFER = "prefer"  # one of this tree's shards: take it when free or expired; claim it from a tree serving it for us
    TAKE = "take"  # another's shard (CLANKIE_DISCORD_SHARD_TAKEOVER=any): only when free or expired and not claimed
    JOIN = "join"  # only join this tree's own live lease (the service, for a shard its bridge took for another)


@dataclass(frozen=True, slots=True)
class RowNow:
    """A lease row as an acquire finds it, locked: its holder, whether its lease is live, whether the holder prefers
    the shard, and a claim on it (whose, and whether it is live: younger than the TTL)."""

    holder: str | None
    live: bool
    preferred: bool = True
    claimed_by: str | None = None
    claim_live: bool = False


@dataclass(frozen=True, slots=True)
class Move:
    """What an acquire does: take the shard (``join``: it is ``holder``'s live lease already, epoch kept), write a
    claim on it, and how a take counts (``expired``, ``handback`` or not at all)."""

    take: bool = False
    join: bool = False
    claim: bool = False
    how: Literal["expired", "handback"] | None = None


def decide(want: Want, holder: str, row: RowNow) -> Move:
    """The acquire's rule (pure): ``holder`` wanting the shard as ``want``, the row as it is."""
    if row.holder == holder and row.live:
        return Move(take=True, join=True)  # this tree's own lease: its other process, or its next one
    if want is Want.JOIN:
        return Move()
    if row.holder is None or not row.live:  # free (released, never held) or expired
        if want is Want.TAKE and row.claim_live and row.claimed_by != holder:
            return Move()  # released for the tree that claims it: not a third tree's to take
        if row.holder is not None and row.holder != holder:
            return Move(take=True, how="expired")
        if row.holder is None and row.claimed_by == holder and row.claim_live:
            return Move(take=True, how="handback")
        return Move(take=True)
    if want is Want.PREFER and not row.preferred:
        return Move(claim=True)  # ours, served for us by a tree that does not prefer it: it hands it back
    return Move()
