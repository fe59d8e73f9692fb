"""Cache lifetime by pace and cache health (pure rules)."""

from __future__ import annotations

from service.captain.spend.cache_lifetime import Health, Pace, choose, mean_cost, survives, turn_cost

PREFIX, ADDED = 16_000, 500


def test_the_arithmetic_of_one_turn() -> None:
    """Warm: 0.1 x prefix + write x new; expired: write x everything (5m writes 1.25x, 1h 2x)."""
    assert turn_cost("5m", 60, PREFIX, ADDED) == 0.1 * PREFIX + 1.25 * ADDED
    assert turn_cost("5m", 480, PREFIX, ADDED) == 1.25 * (PREFIX + ADDED)
    assert turn_cost("1h", 480, PREFIX, ADDED) == 0.1 * PREFIX + 2.0 * ADDED
    assert turn_cost("1h", 4000, PREFIX, ADDED) == 2.0 * (PREFIX + ADDED)


def test_a_room_that_speaks_every_eight_minutes_is_cached_for_an_hour() -> None:
    assert choose([480.0] * 8, PREFIX, ADDED) == "1h"
    assert mean_cost("1h", [480.0], PREFIX, ADDED) / mean_cost("5m", [480.0], PREFIX, ADDED) < 0.2


def test_a_room_that_bursts_is_cached_for_five_minutes() -> None:
    assert choose([5.0, 20.0, 40.0, 90.0], PREFIX, ADDED) == "5m"


def test_rooms_quieter_than_an_hour_and_rooms_never_seen_get_five_minutes() -> None:
    assert choose([5400.0] * 4, PREFIX, ADDED) == "5m"
    assert choose([], PREFIX, ADDED) == "5m"


def test_a_gap_at_the_edge_of_a_lifetime_counts_as_past_it() -> None:
    """A room that speaks exactly every hour keeps just missing the hour's entry: 5 minutes is cheaper."""
    assert survives("1h", 3569.0) and not survives("1h", 3570.0) and not survives("1h", 3600.0)
    assert survives("5m", 269.0) and not survives("5m", 300.0)
    assert choose([3600.0] * 4, PREFIX, ADDED) == "5m"


def test_a_mixed_pace_takes_the_cheaper_mean() -> None:
    """Mostly bursts with an occasional 20-minute pause: one expired prefix outweighs many small 1h writes."""
    gaps = [10.0] * 3 + [1200.0]
    assert choose(gaps, PREFIX, ADDED) == "1h"
    assert choose([10.0] * 60 + [1200.0], PREFIX, ADDED) == "5m"  # past 48 bursts a pause, 5m is cheaper


def test_a_lanes_pace_keeps_its_newest_gaps_and_learns_its_sizes() -> None:
    pace = Pace(keep=3)
    pace.called(0.0, 10_000, True)
    for t in (480.0, 960.0, 1440.0, 1920.0):
        pace.turn_started(t)
        pace.called(t, 10_000 + int(t), True)
    assert list(pace.gaps) == [480.0, 480.0, 480.0] and pace.prefix == 11_920 and pace.added == 480
    assert pace.lifetime() == "1h"


def _broken(health: Health) -> bool:
    return health.broken


def test_a_warm_call_that_reads_too_little_trips_the_health_warning_once() -> None:
    """Warm calls reading most of their input are healthy; one reading 10 % trips it; the next bad one does not
    trip it again; a good one re-arms it. A call after the lifetime ran out is cold and never trips it."""
    health = Health(threshold=0.7)
    assert not health.called(0.0, "5m", 0, 10_000)  # a lane's first call is cold
    assert not health.called(30.0, "5m", 9_500, 10_000)
    assert health.called(60.0, "5m", 1_000, 10_000)
    assert not health.called(90.0, "5m", 1_000, 10_000)
    assert _broken(health)
    assert not health.called(120.0, "5m", 9_000, 10_000)
    assert not _broken(health)  # re-armed
    assert not health.called(1000.0, "5m", 0, 10_000)  # 880 s later: the 5m entry expired, a write is expected
    assert health.share == (9_500 + 1_000 + 1_000 + 9_000) / 60_000
