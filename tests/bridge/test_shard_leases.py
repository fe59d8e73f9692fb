"""The bridge's view of its shard leases (bridge/shard_leases.py): held only when every shard is; a loss says so."""

from __future__ import annotations

from typing import Any, cast

from bridge.shard_leases import ShardLeases
from clankie.store.lease import Action, Kind
from clankie.store.leases import PgLeases
from clankie.testing.clock import FakeClock


def leases() -> ShardLeases:
    never_called = cast(PgLeases, cast(Any, object()))  # the keepers reach the database only in run()
    return ShardLeases(never_called, [(0, 2), (1, 2)], "host:0123abcd", FakeClock(), renew=2.0, ttl=6.0)


def held(leases: ShardLeases) -> bool:  # a call each time (mypy would take two reads of the property for one)
    return leases.held


def test_the_gateway_may_open_only_once_every_shard_is_held_and_a_loss_closes_it() -> None:
    two = leases()
    assert not held(two) and two.detail() == "leases: 0/2 unheld, 1/2 unheld"
    two.on_action("0/2", Action(Kind.SERVE, 3))
    assert not held(two)  # shard 1 is another tree's: no gateway for shard 0 alone
    two.on_action("1/2", Action(Kind.SERVE, 1))
    assert held(two) and not two.lost.is_set()
    two.on_action("1/2", Action(Kind.STOP_SERVING, 1, "taken"))
    assert not held(two) and two.lost.is_set()
    assert two.report()["holder"] == "host:0123abcd"
    two.on_action("1/2", Action(Kind.SERVE, 2))
    assert held(two) and not two.lost.is_set()  # back: the gateway opens again
