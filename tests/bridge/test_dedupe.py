"""The de-duplication memory: bytes per id, a bound that never refuses, the horizon it keeps, and a restart."""

from __future__ import annotations

import tracemalloc

import pytest

from bridge.dedupe import Dedupe, Seen, fp_key, id_key

SNOW = 1_300_000_000_000_000_000  # a Discord id of 2024
STEP = 1 << 22  # one millisecond of snowflake
HOUR = 3600.0


def sid(n: int) -> str:
    return str(SNOW + n * STEP)


def memory(bound: int = 100, horizon: float = 900.0, retention: float = 7 * HOUR) -> Dedupe:
    return Dedupe(retention=retention, horizon=horizon, bound=bound)


def test_a_snowflake_is_a_number_and_anything_else_is_kept_by_value() -> None:
    """Canonical decimal ids up to 2⁶⁴−1 are numbers; "m1", "07", "" and 2⁶⁴ are not (they are kept by value)."""
    assert id_key("1300000000000000000") == 1_300_000_000_000_000_000
    assert id_key("0") == 0 and id_key(str((1 << 64) - 1)) == (1 << 64) - 1
    assert [id_key(s) for s in ("m1", "07", "", str(1 << 64), "١٢")] == [None] * 5
    d = memory()
    for did in ("m1", "07", "7", sid(1)):
        d.add(did, "fp", 10.0 + 7 * HOUR)
    assert all(d.check(did, "fp", 11.0) is Seen.SAME for did in ("m1", "07", "7", sid(1)))
    assert d.check("m1", "other", 11.0) is Seen.CONFLICT and d.check("m2", "fp", 11.0) is Seen.NEW
    assert len(d) == 4


def test_out_of_order_ids_are_found_and_expire_at_the_retention() -> None:
    """Ids arriving out of order (a catch-up reads older messages late) are all found; each is forgotten once its
    retention has passed."""
    d = memory(retention=100.0)
    order = [5, 1, 9, 3, 7, 2, 8, 0, 6, 4]
    for k, n in enumerate(order):
        d.add(sid(n), f"fp{n}", float(k) + 100.0)
    assert all(d.check(sid(n), f"fp{n}", 10.0) is Seen.SAME for n in order)
    assert d.check(sid(5), "fp5", 100.0) is Seen.NEW  # admitted at 0: gone at 100
    d.prune(105.5)
    assert sorted(n for n in range(10) if sid(n) in d) == [0, 4, 6, 8]  # admitted at 6..9


def test_at_the_bound_the_oldest_beyond_the_horizon_go_and_nothing_is_refused() -> None:
    """At the bound every new id is taken; the oldest ids admitted before the horizon make room, and each one
    admitted within it is still recognised."""
    d = memory(bound=100, horizon=900.0)
    for n in range(100):
        d.add(sid(n), "fp", float(n) + 7 * HOUR)  # admitted at 0..99
    for n in range(100, 250):
        d.add(sid(n), "fp", 1000.0 + 10 * n + 7 * HOUR)  # one every 10 s: each is beyond the horizon 100 ids later
    assert len(d) == 100 and d.evicted == 150 and d.forgot_early == 0
    assert [n for n in range(250) if sid(n) in d] == list(range(150, 250))
    assert d.check(sid(249), "fp", 1250.0) is Seen.SAME and d.check(sid(150), "fp", 1250.0) is Seen.SAME


def test_within_the_horizon_ids_are_kept_past_the_bound_up_to_twice_it() -> None:
    """Ids a catch-up could still hand back are not forgotten for the bound; only past twice it does the oldest go,
    counted as forgotten early."""
    d = memory(bound=100, horizon=900.0)
    for n in range(150):
        d.add(sid(n), "fp", float(n) + 7 * HOUR)
    assert len(d) == 150 and d.evicted == 0 and all(sid(n) in d for n in range(150))
    for n in range(150, 260):
        d.add(sid(n), "fp", float(n) + 7 * HOUR)
    assert len(d) == 200 and d.forgot_early == 60 and sid(59) not in d and sid(60) in d


def test_non_snowflake_ids_share_the_bound_oldest_first() -> None:
    """Ids kept by value count toward the same bound and leave in admission order with the snowflakes."""
    d = memory(bound=3, horizon=10.0)
    d.add("a", "fp", 0.0 + 7 * HOUR)
    d.add(sid(1), "fp", 1.0 + 7 * HOUR)
    d.add("b", "fp", 2.0 + 7 * HOUR)
    d.add(sid(2), "fp", 30.0 + 7 * HOUR)
    assert "a" not in d and {sid(1), "b", sid(2)} <= {k for k in ("a", "b", sid(1), sid(2)) if k in d}
    d.add("c", "fp", 31.0 + 7 * HOUR)
    assert sid(1) not in d and len(d) == 3 and d.evicted == 2


def test_a_discarded_id_may_come_again() -> None:
    """A delivery whose turn could not run is forgotten, so its re-delivery is new."""
    d = memory()
    d.add(sid(1), "fp", 7 * HOUR)
    d.add("m1", "fp", 7 * HOUR)
    d.discard(sid(1))
    d.discard("m1")
    d.discard(sid(2))  # never held: nothing happens
    assert d.check(sid(1), "fp", 1.0) is Seen.NEW and d.check("m1", "fp", 1.0) is Seen.NEW and len(d) == 0


def test_a_snapshot_restores_exactly_what_was_held() -> None:
    """What a restart reads back is what was held: the same ids, bodies and expiries; a torn or foreign file is
    refused, not half read."""
    d = memory(bound=5000)
    for n in range(5000):
        d.add(sid(n), f"fp{n}", float(n) + 100.0 + 7 * HOUR)
    d.add("m1", "x", 5000.0 + 7 * HOUR)  # past the bound: the oldest (admitted before the horizon) goes
    d.prune(4200.0 + 7 * HOUR)  # the ids admitted by then expire: the front of the arrays is cut away
    data = d.snapshot()
    again = memory(bound=5000)
    assert again.restore(data) == len(d) == 900
    assert again.check("m1", "x", 5001.0) is Seen.SAME
    assert again.check(sid(4999), "fp4999", 5001.0) is Seen.SAME and again.check(sid(4100), "fp4100", 5001.0) is Seen.NEW
    assert again.snapshot() == data
    for bad in (data[:-1], b"nonsense", data[:16] + b"\xff" * (len(data) - 16)):
        with pytest.raises(ValueError):
            memory().restore(bad)


def test_a_snapshot_larger_than_the_bound_is_cut_to_it() -> None:
    """A smaller bound after a restart keeps the newest ids."""
    d = memory(bound=1000, horizon=1.0)
    for n in range(1000):
        d.add(sid(n), "fp", float(n) + 7 * HOUR)
    small = memory(bound=10, horizon=1.0)
    small.restore(d.snapshot())
    assert len(small) == 10 and sid(990) in small and sid(989) not in small


def test_a_remembered_id_costs_bytes_not_objects() -> None:
    """100,000 snowflake ids cost at most 32 bytes each (24 in the arrays, the rest their slack)."""
    d = memory(bound=1_000_000)
    fps = [f"{n:032x}" for n in range(64)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(100_000):
            d.add(sid(n), fps[n % 64], float(n) + 7 * HOUR)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(d) == 100_000
    assert held / 100_000 <= 32, f"{held / 100_000:.1f} bytes per id"


def test_entries_are_everything_held_as_a_snapshot_restores_it_snowflakes_first() -> None:
    """What ``clankie migrate`` copies: each id held with its fingerprint's 64 bits and expiry, the snowflakes in id
    order, then the others oldest first; a discarded id is gone; an expired one stays until a prune lets it go; a
    restored snapshot holds the same entries."""
    m = memory()
    m.add(sid(2), "b", 10 * HOUR)
    m.add("m1", "x", 9 * HOUR)
    m.add(sid(1), "a", 8 * HOUR)
    m.add(sid(3), "c", 11 * HOUR)
    m.discard(sid(3))
    assert m.entries() == [(sid(1), fp_key("a"), 8 * HOUR), (sid(2), fp_key("b"), 10 * HOUR), ("m1", fp_key("x"), 9 * HOUR)]
    again = memory()
    again.restore(m.snapshot())
    assert again.entries() == m.entries()
    m.prune(9.5 * HOUR)  # sid(1) and m1 have expired
    assert m.entries() == [(sid(2), fp_key("b"), 10 * HOUR)]
