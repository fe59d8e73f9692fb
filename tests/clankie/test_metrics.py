"""clankie.metrics: a child's meter counts only catalogue families, stays bounded, and costs nothing while off."""

from __future__ import annotations

import pytest

from clankie.metrics import FAMILIES, MAX_LABEL_CHARS, MAX_SERIES, OTHER, Meter


def on() -> Meter:
    return Meter(enabled=True)


def test_a_disabled_meter_counts_nothing_and_reports_nothing() -> None:
    """Off (the default), every call returns at once and the heartbeat carries no report."""
    meter = Meter()
    meter.count("clankie_turns_total", "settled", "")
    meter.observe("clankie_turn_duration_seconds", 1.0)
    meter.set("clankie_lanes_live", 3)
    assert meter.report() is None


def test_counters_add_up_per_label_set() -> None:
    """Each label set is its own series; ``by`` adds that many."""
    meter = on()
    meter.count("clankie_turns_total", "settled", "")
    meter.count("clankie_turns_total", "settled", "")
    meter.count("clankie_turns_total", "failed", "captain_model_failed")
    meter.count("clankie_model_tokens_total", "output", by=120)
    report = meter.report()
    assert report is not None
    turns = {s.labels: s.value for s in report.counters["clankie_turns_total"]}
    assert turns == {("settled", ""): 2.0, ("failed", "captain_model_failed"): 1.0}
    assert [(s.labels, s.value) for s in report.counters["clankie_model_tokens_total"]] == [(("output",), 120.0)]


def test_a_histogram_counts_each_observation_in_its_bucket_and_sums_them() -> None:
    """0.3 s lands in the first bucket (0.5), 7 s in the 10 s one, an hour in +Inf."""
    meter = on()
    for seconds in (0.3, 7.0, 3600.0):
        meter.observe("clankie_turn_duration_seconds", seconds)
    report = meter.report()
    assert report is not None
    hist = report.histograms["clankie_turn_duration_seconds"]
    bounds = FAMILIES["clankie_turn_duration_seconds"].buckets
    assert len(hist.counts) == len(bounds) + 1
    assert hist.counts[0] == 1 and hist.counts[bounds.index(10.0)] == 1 and hist.counts[-1] == 1
    assert hist.sum == pytest.approx(3607.3)


def test_an_observation_on_a_bound_counts_in_that_bucket() -> None:
    """Prometheus buckets are ``le``: exactly 0.5 s is in the 0.5 bucket."""
    meter = on()
    meter.observe("clankie_turn_duration_seconds", 0.5)
    report = meter.report()
    assert report is not None and report.histograms["clankie_turn_duration_seconds"].counts[0] == 1


def test_gauges_hold_the_last_value() -> None:
    meter = on()
    meter.set("clankie_lanes_live", 3)
    meter.set("clankie_lanes_live", 5)
    report = meter.report()
    assert report is not None
    assert [(s.labels, s.value) for s in report.gauges["clankie_lanes_live"]] == [((), 5.0)]


def test_a_family_keeps_at_most_max_series_label_sets_and_counts_the_rest_under_other() -> None:
    """At the bound, a new label set counts under ``other``; known ones still count as themselves."""
    meter = on()
    for i in range(MAX_SERIES):
        meter.count("clankie_discord_requests_total", f"GET /route/{i}", "2xx")
    meter.count("clankie_discord_requests_total", "GET /route/new", "2xx")
    meter.count("clankie_discord_requests_total", "GET /route/another", "5xx")
    meter.count("clankie_discord_requests_total", "GET /route/0", "2xx")
    report = meter.report()
    assert report is not None
    series = {s.labels: s.value for s in report.counters["clankie_discord_requests_total"]}
    assert len(series) == MAX_SERIES + 1
    assert series[(OTHER, OTHER)] == 2.0
    assert series[("GET /route/0", "2xx")] == 2.0


def test_a_label_value_is_cut_to_its_bound() -> None:
    meter = on()
    meter.count("clankie_model_failovers_total", "x" * 500)
    report = meter.report()
    assert report is not None
    assert report.counters["clankie_model_failovers_total"][0].labels == ("x" * MAX_LABEL_CHARS,)


@pytest.mark.parametrize(
    ("call", "why"),
    [
        (lambda m: m.count("clankie_no_such_total"), KeyError),
        (lambda m: m.count("clankie_turns_total", "settled"), ValueError),  # two labels, one value
        (lambda m: m.count("clankie_lanes_live"), ValueError),  # a gauge is not counted
        (lambda m: m.count("clankie_turns_total", "a", "b", by=-1), ValueError),  # a counter never goes down
        (lambda m: m.set("clankie_turns_total", 1, "a", "b"), ValueError),
        (lambda m: m.observe("clankie_lanes_live", 1), ValueError),
    ],
)
def test_a_name_or_shape_outside_the_catalogue_is_a_programming_error(call: object, why: type[Exception]) -> None:
    with pytest.raises(why):
        call(on())  # type: ignore[operator]


def test_every_counter_ends_in_total_and_no_family_has_a_room_user_or_message_label() -> None:
    """Low cardinality by construction: the catalogue itself carries no per-room, per-person or per-message label."""
    for name, fam in FAMILIES.items():
        assert name.startswith("clankie_")
        assert (fam.kind == "counter") == name.endswith("_total"), name
        assert not {"room", "channel", "guild", "user", "author", "message", "lane"} & set(fam.labels), name
        assert (fam.kind == "histogram") == bool(fam.buckets), name
        assert list(fam.buckets) == sorted(fam.buckets), name
