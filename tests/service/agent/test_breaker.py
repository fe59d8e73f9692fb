"""A model route's breaker: every move through its table, the waits before a probe, and their bound."""

from __future__ import annotations

import typing

import pytest

from clankie.errors import LocalProtocolError
from service.agent.breaker import BASE_SECONDS, CAP_SECONDS, TRANSITIONS, Breaker, Event, State

REFUSED = [(s, e) for s in typing.get_args(State) for e in typing.get_args(Event) if (s, e) not in TRANSITIONS]


@pytest.mark.parametrize(("state", "event"), REFUSED)
def test_a_pair_not_in_the_table_raises_and_leaves_the_state(state: State, event: Event) -> None:
    """A probe while one is in flight, a probe's result with no probe out, a probe of a closed route: a bug, refused."""
    breaker = Breaker(state=state, retry_at=7.0)
    with pytest.raises(LocalProtocolError):
        breaker.apply(event, 100.0)
    assert breaker.state == state and breaker.retry_at == 7.0


def test_a_failure_opens_it_for_the_base_wait_and_only_then_is_it_due() -> None:
    """Closed -> open on a failure; not due before the base wait, due at it; the opening is counted once."""
    b = Breaker()
    assert b.apply("failed", 10.0) == "open"
    assert b.opened == 1 and b.down_since == 10.0
    assert not b.due(10.0 + BASE_SECONDS - 0.01) and b.due(10.0 + BASE_SECONDS)
    b.apply("failed", 11.0)  # a call sent before it opened: the wait is not pushed back
    assert b.retry_at == 10.0 + BASE_SECONDS and b.opened == 1


def test_a_server_wait_longer_than_the_base_is_honoured() -> None:
    """A 429 that names 90 s keeps the route down 90 s, not the base wait."""
    b = Breaker()
    b.apply("failed", 0.0, hint=90.0)
    assert not b.due(89.0) and b.due(90.0)


def test_failed_probes_double_the_wait_up_to_the_cap() -> None:
    """5, 10, 20, 20 … : a route that stays down costs one probe per cap seconds at most (the bound)."""
    b = Breaker()
    now = 0.0
    b.apply("failed", now)
    waits = []
    for _ in range(6):
        now = b.retry_at
        b.apply("probe", now)
        b.apply("probe_failed", now)
        waits.append(b.retry_at - now)
    assert waits == [2 * BASE_SECONDS, 4 * BASE_SECONDS, CAP_SECONDS, CAP_SECONDS, CAP_SECONDS, CAP_SECONDS]
    assert max(waits) == CAP_SECONDS


def test_a_probe_that_answers_closes_it_and_other_calls_do_not() -> None:
    """Only the probe's answer closes a half-open route; calls sent earlier do not move it."""
    b = Breaker()
    b.apply("failed", 0.0)
    assert b.apply("succeeded", 1.0) == "open"  # a call sent before it opened
    b.apply("probe", BASE_SECONDS)
    assert b.apply("succeeded", BASE_SECONDS) == "half_open" and b.apply("failed", BASE_SECONDS) == "half_open"
    assert b.apply("probe_succeeded", BASE_SECONDS + 1) == "closed"
    assert b.up and b.down_since is None and b.wait == 0.0


def test_an_abandoned_probe_lets_the_next_call_probe_at_once() -> None:
    """A probe cancelled before its answer (an abort) leaves the route open and due: no wait is added."""
    b = Breaker()
    b.apply("failed", 0.0)
    b.apply("probe", BASE_SECONDS)
    assert b.apply("probe_abandoned", BASE_SECONDS + 1) == "open"
    assert b.due(BASE_SECONDS + 1)
