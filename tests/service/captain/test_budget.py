"""The day budgets (pure): refusal before a call, reservations of calls in flight, 80 % once, raise and reset, bounds."""

from __future__ import annotations

import pytest

from service.captain.spend.budget import TREE, Amount, DayBudgets, Scope

NONE = Amount()


def budgets(tree: Amount = NONE, room: Amount = NONE, user: Amount = NONE, max_keys: int = 100) -> DayBudgets:
    return DayBudgets({Scope.TREE: tree, Scope.ROOM: room, Scope.USER: user}, day="2027-01-15", max_keys=max_keys)


KEYS = (TREE, "room:1/2", "user:42")


def test_a_call_starts_while_something_is_left_and_not_after() -> None:
    """A 1-token budget lets the first call through (nothing spent yet) and refuses the next."""
    b = budgets(tree=Amount(tokens=1))
    assert b.refusal("lane-a", KEYS, Amount()) is None
    b.charge("lane-a", KEYS, Amount(500, 0.01))
    assert b.refusal("lane-a", KEYS, Amount()) == TREE
    assert b.standing(TREE).tokens_left == -499 and b.standing(TREE).exhausted


@pytest.mark.parametrize(("scope", "key"), [(Scope.ROOM, "room:1/2"), (Scope.USER, "user:42")])
def test_a_room_or_person_budget_stops_only_its_key(scope: Scope, key: str) -> None:
    limit = Amount(usd=0.05)
    b = budgets(room=limit) if scope is Scope.ROOM else budgets(user=limit)
    b.charge(None, KEYS, Amount(100, 0.05))
    assert b.refusal("lane-a", KEYS, Amount()) == key
    assert b.refusal("lane-b", (TREE, "room:1/3", "user:43"), Amount()) is None


def test_calls_in_flight_count_against_the_others_at_their_estimate() -> None:
    """Two lanes share a 1,000-token budget: while one call estimated at 1,000 is in flight, the other waits its
    turn (refused), and once it is charged the reservation is gone."""
    b = budgets(tree=Amount(tokens=1000))
    assert b.refusal("lane-a", KEYS, Amount(1000)) is None
    assert b.refusal("lane-b", (TREE, "room:1/3"), Amount(1000)) == TREE
    b.charge("lane-a", KEYS, Amount(400))
    assert b.refusal("lane-b", (TREE, "room:1/3"), Amount(1000)) is None
    b.release("lane-b")
    assert b.refusal("lane-a", KEYS, Amount(1000)) is None  # 600 left, nothing else in flight


def test_eighty_percent_is_reported_once_per_key_and_again_after_a_raise() -> None:
    b = budgets(tree=Amount(tokens=1000))
    assert b.charge(None, (TREE,), Amount(700)) == []
    crossed = b.charge(None, (TREE,), Amount(100))
    assert [s.key for s in crossed] == [TREE]
    assert b.charge(None, (TREE,), Amount(50)) == []
    b.raise_limit(TREE, Amount(tokens=1000))
    assert [s.key for s in b.charge(None, (TREE,), Amount(10))] == [TREE]


def test_the_operator_raises_a_budget_or_resets_what_a_key_spent() -> None:
    b = budgets(room=Amount(tokens=100))
    b.charge(None, KEYS, Amount(150))
    assert b.refusal("lane-a", KEYS, Amount()) == "room:1/2"
    assert b.raise_limit("room:1/2", Amount(tokens=1000)).tokens_left == 850
    assert b.refusal("lane-a", KEYS, Amount()) is None
    assert b.reset("user:42").spent == Amount()
    b.charge("lane-a", KEYS, Amount(5))
    assert b.used("user:42") == Amount(5) and b.used("room:1/2") == Amount(155)


def test_a_rebuild_raises_a_key_to_what_the_trees_say_only_where_they_say_more() -> None:
    b = budgets()
    b.add("room:1/2", Amount(100, 0.5))
    b.at_least("room:1/2", Amount(80, 0.75))
    assert b.used("room:1/2") == Amount(100, 0.75)


def test_held_keys_are_bounded_and_the_tree_is_never_forgotten() -> None:
    """At the bound, the key charged least recently goes first; the tree and keys with a call in flight stay."""
    b = budgets(max_keys=3)
    b.charge(None, (TREE, "room:1/1"), Amount(1))
    b.charge(None, ("room:1/2",), Amount(1))
    b.charge(None, ("room:1/3",), Amount(1))
    assert set(b.keys()) == {TREE, "room:1/2", "room:1/3"} and b.forgotten == 1
    b.refusal("lane-a", ("room:1/2",), Amount(1))  # a call in flight holds its key
    b.charge(None, ("room:1/4",), Amount(1))
    assert set(b.keys()) == {TREE, "room:1/2", "room:1/4"} and b.forgotten == 2
