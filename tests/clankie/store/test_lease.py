"""The pure lease core: every move through its table, the local deadline before the database's expiry, and a holder
that cannot renew reporting the lease lost on its own clock."""

from __future__ import annotations

import itertools

import pytest

from clankie.store.lease import (
    IGNORED,
    LEASE_MARGIN,
    TRANSITIONS,
    Action,
    Kind,
    Lease,
    LeaseEvent,
    LeaseState,
    LeaseStateError,
    Move,
    RowNow,
    Want,
    decide,
)

RENEW, TTL = 2.0, 6.0


def held(now: float = 100.0, epoch: int = 3) -> Lease:
    lease = Lease(renew=RENEW, ttl=TTL)
    lease.handle(LeaseEvent.WANT, now)
    lease.handle(LeaseEvent.GRANTED, now + 0.05, epoch)
    return lease


def test_a_granted_lease_is_served_at_its_epoch_until_ttl_minus_the_margin_after_the_acquire_began() -> None:
    """The deadline counts from the acquire's start, not its answer: the database's now() came after that start."""
    lease = Lease(renew=RENEW, ttl=TTL)
    assert lease.handle(LeaseEvent.WANT, 100.0) == [Action(Kind.ACQUIRE)]
    assert lease.handle(LeaseEvent.GRANTED, 100.3, 7) == [Action(Kind.SERVE, 7)]
    assert (lease.state, lease.epoch, lease.serving) == (LeaseState.HELD, 7, True)
    assert lease.deadline == 100.0 + TTL - LEASE_MARGIN
    assert lease.next_renew == 100.0 + RENEW


def test_a_renew_is_due_each_period_and_moves_the_deadline_from_its_own_start() -> None:
    lease = held(now=100.0)
    assert lease.due(101.9) is None
    assert lease.due(102.0) is LeaseEvent.RENEW_DUE
    assert lease.handle(LeaseEvent.RENEW_DUE, 102.0) == [Action(Kind.RENEW, 3)]
    assert lease.serving, "a renew in flight still serves"
    assert lease.handle(LeaseEvent.RENEWED, 102.4) == []
    assert (lease.state, lease.deadline, lease.next_renew) == (LeaseState.HELD, 102.0 + TTL - LEASE_MARGIN, 104.0)


def test_one_failed_renew_is_survived_and_the_next_lands_before_the_deadline() -> None:
    """TTL >= 2 x renew + margin: after a success, the renew at +2 s may fail; the one at +4 s still starts in time."""
    lease = held(now=100.0)
    lease.handle(LeaseEvent.RENEW_DUE, 102.0)
    assert lease.handle(LeaseEvent.FAILED, 102.1) == []
    assert lease.state is LeaseState.HELD and lease.deadline == 105.0
    assert lease.due(104.0) is None and lease.due(104.1) is LeaseEvent.RENEW_DUE
    lease.handle(LeaseEvent.RENEW_DUE, 104.1)
    lease.handle(LeaseEvent.RENEWED, 104.5)
    assert lease.deadline == 104.1 + TTL - LEASE_MARGIN


def test_a_holder_that_cannot_renew_reports_lost_before_the_database_can_expire_its_lease() -> None:
    """No answer from the database at all: at the start of the last good renew + TTL - margin the shard stops being
    served; the database's expiry is that start + TTL at the earliest, so the margin is left for the stop."""
    lease = held(now=100.0)
    lease.handle(LeaseEvent.RENEW_DUE, 102.0)  # hangs: no answer ever comes
    assert lease.due(104.99) is None
    assert lease.due(105.0) is LeaseEvent.DEADLINE
    assert lease.handle(LeaseEvent.DEADLINE, 105.0) == [Action(Kind.STOP_SERVING, 3, "deadline")]
    assert (lease.state, lease.serving) == (LeaseState.LOST, False)
    earliest_database_expiry = 100.0 + TTL
    assert 105.0 <= earliest_database_expiry - LEASE_MARGIN


def test_a_refused_renew_means_another_tree_took_the_shard() -> None:
    lease = held()
    lease.handle(LeaseEvent.RENEW_DUE, 102.0)
    assert lease.handle(LeaseEvent.REFUSED, 102.1) == [Action(Kind.STOP_SERVING, 3, "taken")]
    assert lease.state is LeaseState.LOST


def test_a_late_answer_to_a_renew_the_deadline_cut_off_changes_nothing() -> None:
    """Once lost, the lease stays lost: only a new acquire (a new epoch) makes the shard ours again."""
    lease = held()
    lease.handle(LeaseEvent.RENEW_DUE, 102.0)
    lease.handle(LeaseEvent.DEADLINE, 105.0)
    for late in (LeaseEvent.RENEWED, LeaseEvent.REFUSED, LeaseEvent.FAILED):
        assert lease.handle(late, 105.5) == []
        assert lease.state is LeaseState.LOST
    assert lease.handle(LeaseEvent.WANT, 106.0) == [Action(Kind.ACQUIRE)]


def test_release_stops_serving_before_the_row_is_freed() -> None:
    lease = held()
    assert lease.handle(LeaseEvent.RELEASE, 101.0) == [Action(Kind.STOP_SERVING, 3, "released"), Action(Kind.RELEASE, 3)]
    assert not lease.serving
    assert lease.handle(LeaseEvent.FREED, 101.1) == []
    assert lease.state is LeaseState.RELEASED


def test_a_lease_another_tree_holds_leaves_us_unheld() -> None:
    lease = Lease(renew=RENEW, ttl=TTL)
    lease.handle(LeaseEvent.WANT, 1.0)
    assert lease.handle(LeaseEvent.TAKEN, 1.1) == []
    assert (lease.state, lease.serving, lease.wake_at()) == (LeaseState.UNHELD, False, None)


def test_a_granted_epoch_is_at_least_one() -> None:
    lease = Lease(renew=RENEW, ttl=TTL)
    lease.handle(LeaseEvent.WANT, 1.0)
    with pytest.raises(LeaseStateError):
        lease.handle(LeaseEvent.GRANTED, 1.1, 0)
    assert lease.state is LeaseState.ACQUIRING


@pytest.mark.parametrize(("state", "event"), [
    pair for pair in itertools.product(LeaseState, LeaseEvent) if pair not in TRANSITIONS and pair not in IGNORED
])
def test_every_pair_outside_the_table_raises_and_leaves_the_state(state: LeaseState, event: LeaseEvent) -> None:
    """A move the table does not have is a bug in the shell: it raises and the state stays."""
    lease = Lease(renew=RENEW, ttl=TTL)
    lease.state = state
    with pytest.raises(LeaseStateError):
        lease.handle(event, 1.0, 1)
    assert lease.state is state


def test_the_window_must_hold_a_renew_period() -> None:
    with pytest.raises(ValueError, match="at least one renew period"):
        Lease(renew=5.0, ttl=5.5)


ME, OTHER = "host:me", "host:other"


@pytest.mark.parametrize(("want", "row", "move"), [
    # this tree's own live lease is joined whatever it wants (its other process, or its next one)
    (Want.PREFER, RowNow(ME, live=True), Move(take=True, join=True)),
    (Want.TAKE, RowNow(ME, live=True, preferred=False), Move(take=True, join=True)),
    (Want.JOIN, RowNow(ME, live=True), Move(take=True, join=True)),
    # a join never takes: not a free row, not an expired one
    (Want.JOIN, RowNow(None, live=False), Move()),
    (Want.JOIN, RowNow(OTHER, live=False), Move()),
    # free or expired: taken; another tree's expired lease is a takeover, a tree's own expired one is not
    (Want.PREFER, RowNow(None, live=False), Move(take=True)),
    (Want.TAKE, RowNow(None, live=False), Move(take=True)),
    (Want.PREFER, RowNow(OTHER, live=False), Move(take=True, how="expired")),
    (Want.TAKE, RowNow(OTHER, live=False, preferred=True), Move(take=True, how="expired")),
    (Want.PREFER, RowNow(ME, live=False), Move(take=True)),
    # released at this tree's claim: a handback; a stale claim of ours is not one
    (Want.PREFER, RowNow(None, live=False, claimed_by=ME, claim_live=True), Move(take=True, how="handback")),
    (Want.PREFER, RowNow(None, live=False, claimed_by=ME, claim_live=False), Move(take=True)),
    # released for the tree that claims it: no third tree takes it while the claim is live, a preferring one may
    (Want.TAKE, RowNow(None, live=False, claimed_by=OTHER, claim_live=True), Move()),
    (Want.TAKE, RowNow(None, live=False, claimed_by=OTHER, claim_live=False), Move(take=True)),
    (Want.PREFER, RowNow(None, live=False, claimed_by=OTHER, claim_live=True), Move(take=True)),
    # live under another tree: claimed only by a tree that prefers it from one that does not
    (Want.PREFER, RowNow(OTHER, live=True, preferred=False), Move(claim=True)),
    (Want.PREFER, RowNow(OTHER, live=True, preferred=True), Move()),
    (Want.TAKE, RowNow(OTHER, live=True, preferred=False), Move()),
    (Want.JOIN, RowNow(OTHER, live=True, preferred=False), Move()),
])
def test_who_may_take_a_lease_row(want: Want, row: RowNow, move: Move) -> None:
    """The acquire's rule: a tree takes its preferred shards when free or expired and claims one another tree serves
    for it; with takeover ``any`` it takes any other shard free or expired and not claimed; a service only joins."""
    assert decide(want, ME, row) == move
