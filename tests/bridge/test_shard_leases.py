"""The bridge's view of its shard leases (bridge/shard_leases.py): held only when every shard is; a loss says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from bridge.shard_leases import ShardLeases
from clankie.store.lease import Action, Kind
from clankie.store.leases import LeaseRow, PgLeases
from clankie.testing.clock import FakeClock


def leases() -> ShardLeases:
    never_called = cast(PgLeases, cast(Any, object()))  # the keepers reach the database only in run()
    return ShardLeases(never_called, [(0, 2), (1, 2)], "host:0123abcd", FakeClock(), renew=2.0, ttl=6.0)


def held(leases: ShardLeases) -> bool:  # a call each time (mypy would take two reads of the property for one)
    return leases.held


def test_the_gateway_runs_the_shards_whose_leases_are_ours_and_a_loss_takes_its_shard_out() -> None:
    """Each move is told (``changed``); the gateway runs the held shards, none while another tree holds them all."""
    two = leases()
    assert not held(two) and two.gateway_keys() == [] and two.detail() == "leases: 0/2 unheld, 1/2 unheld"
    two.on_action("0/2", Action(Kind.SERVE, 3))
    assert not held(two) and two.gateway_keys() == [(0, 2)]  # shard 1 is another tree's: shard 0 runs alone
    two.changed.clear()
    two.on_action("1/2", Action(Kind.SERVE, 1))
    assert held(two) and two.gateway_keys() == [(0, 2), (1, 2)] and two.changed.is_set()
    two.changed.clear()
    two.on_action("1/2", Action(Kind.STOP_SERVING, 1, "taken"))
    assert not held(two) and two.gateway_keys() == [(0, 2)] and two.changed.is_set()  # shard 1 out, at once
    assert two.report()["holder"] == "host:0123abcd"
    two.on_action("1/2", Action(Kind.SERVE, 2))
    assert held(two) and two.gateway_keys() == [(0, 2), (1, 2)]  # back: the gateway opens again on both


def test_each_shard_is_drained_once_per_epoch_this_process_takes_it_and_told_whether_the_tenure_is_new(
        tmp_path: Path) -> None:
    """``on_taken`` (the bridge drains the shard's journal from the database) is told at the first serve of each
    epoch in this process's life, before the gateway may open: a restarted bridge joining its tree's tenure drains
    its own open deliveries at once (not anew); a lease taken at another epoch is anew (another tree may have served
    it); a renew's serve at the same epoch, or a loss and a rejoin at it, drains nothing again."""
    path = tmp_path / "lease-epochs.json"
    taken: list[tuple[tuple[int, int], bool, bool]] = []

    def bridge() -> ShardLeases:
        never_called = cast(PgLeases, cast(Any, object()))
        mine = ShardLeases(never_called, [(0, 1)], "host:0123abcd", FakeClock(), renew=2.0, ttl=6.0, tenures=path,
                           on_taken=lambda shard, anew: taken.append((shard, anew, mine.held)))
        return mine

    first = bridge()
    first.on_action("0/1", Action(Kind.SERVE, 1))
    assert taken == [((0, 1), True, False)]  # before the gateway may open
    first.on_action("0/1", Action(Kind.STOP_SERVING, 1, "deadline"))
    first.on_action("0/1", Action(Kind.SERVE, 1))
    assert len(taken) == 1  # the same tenure, rejoined: nobody else wrote the shard
    first.on_action("0/1", Action(Kind.STOP_SERVING, 1, "taken"))
    first.on_action("0/1", Action(Kind.SERVE, 2))
    assert taken[1:] == [((0, 1), True, False)]
    bridge().on_action("0/1", Action(Kind.SERVE, 2))  # the next process joins the tenure its tree kept
    assert taken[2:] == [((0, 1), False, False)]
    path.write_bytes(b"{" + b" " * 70_000 + b"}")  # over the bound: not trusted, every shard taken anew
    bridge().on_action("0/1", Action(Kind.SERVE, 2))
    assert taken[3:] == [((0, 1), True, False)]


def test_the_status_line_ends_with_the_last_takeover_and_its_age_on_the_databases_clock_plus_since() -> None:
    """The rows read after a new tenure say shard 0/2 was taken from host:a 10 s before (the database's clock); 5 s
    later the line and the heartbeat say 15 s."""
    clock = FakeClock()
    two = ShardLeases(cast(PgLeases, cast(Any, object())), [(0, 2), (1, 2)], "host:b", clock, renew=2.0, ttl=6.0)
    assert "takeover" not in two.detail() and "takeover" not in two.report()
    two.takeover = (LeaseRow("0/2", "host:b", 3, 4.0, taken_from="host:a", taken_ago=10.0), clock.monotonic())
    clock.advance(5.0)
    assert two.detail() == "leases: 0/2 unheld, 1/2 unheld; last takeover: 0/2 from host:a, 15s ago"
    assert two.report()["takeover"] == {"shard": "0/2", "from": "host:a", "ago_s": 15.0}
