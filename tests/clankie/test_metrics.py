"""clankie.metrics: a child's meter counts only catalogue families, stays bounded, and costs nothing while off; a family
is a typed constant, so a wrong name, kind or label set fails the type check."""

from __future__ import annotations

import pytest

from clankie.metrics import (
    DISCORD_REQUESTS,
    FAMILIES,
    LANES_LIVE,
    MAX_LABEL_CHARS,
    MAX_SERIES,
    MODEL_FAILOVERS,
    MODEL_TOKENS,
    OTHER,
    TURN_DURATION,
    TURNS,
    Counter,
    Meter,
    _catalogue,
    unlabelled,
)


def on() -> Meter:
    return Meter(enabled=True)


def test_a_disabled_meter_counts_nothing_and_reports_nothing() -> None:
    """Off (the default), every call returns at once and the heartbeat carries no report."""
    meter = Meter()
    meter.count(TURNS.of("settled", ""))
    meter.observe(TURN_DURATION, 1.0)
    meter.set(LANES_LIVE.of(), 3)
    assert meter.report() is None


def test_counters_add_up_per_label_set() -> None:
    """Each label set is its own series; ``by`` adds that many."""
    meter = on()
    meter.count(TURNS.of("settled", ""))
    meter.count(TURNS.of(outcome="settled", code=""))
    meter.count(TURNS.of(code="captain_model_failed", outcome="failed"))  # by name, in any order
    meter.count(MODEL_TOKENS.of("output"), by=120)
    report = meter.report()
    assert report is not None
    turns = {s.labels: s.value for s in report.counters["clankie_turns_total"]}
    assert turns == {("settled", ""): 2.0, ("failed", "captain_model_failed"): 1.0}
    assert [(s.labels, s.value) for s in report.counters["clankie_model_tokens_total"]] == [(("output",), 120.0)]


def test_a_histogram_counts_each_observation_in_its_bucket_and_sums_them() -> None:
    """0.3 s lands in the first bucket (0.5), 7 s in the 10 s one, an hour in +Inf."""
    meter = on()
    for seconds in (0.3, 7.0, 3600.0):
        meter.observe(TURN_DURATION, seconds)
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
    meter.observe(TURN_DURATION, 0.5)
    report = meter.report()
    assert report is not None and report.histograms["clankie_turn_duration_seconds"].counts[0] == 1


def test_gauges_hold_the_last_value() -> None:
    meter = on()
    meter.set(LANES_LIVE.of(), 3)
    meter.set(LANES_LIVE.of(), 5)
    report = meter.report()
    assert report is not None
    assert [(s.labels, s.value) for s in report.gauges["clankie_lanes_live"]] == [((), 5.0)]


def test_a_family_keeps_at_most_max_series_label_sets_and_counts_the_rest_under_other() -> None:
    """At the bound, a new label set counts under ``other``; known ones still count as themselves."""
    meter = on()
    for i in range(MAX_SERIES):
        meter.count(DISCORD_REQUESTS.of(f"GET /route/{i}", "2xx"))
    meter.count(DISCORD_REQUESTS.of("GET /route/new", "2xx"))
    meter.count(DISCORD_REQUESTS.of("GET /route/another", "5xx"))
    meter.count(DISCORD_REQUESTS.of("GET /route/0", "2xx"))
    report = meter.report()
    assert report is not None
    series = {s.labels: s.value for s in report.counters["clankie_discord_requests_total"]}
    assert len(series) == MAX_SERIES + 1
    assert series[(OTHER, OTHER)] == 2.0
    assert series[("GET /route/0", "2xx")] == 2.0


def test_a_label_value_is_cut_to_its_bound() -> None:
    meter = on()
    meter.count(MODEL_FAILOVERS.of("x" * 500))
    report = meter.report()
    assert report is not None
    assert report.counters["clankie_model_failovers_total"][0].labels == ("x" * MAX_LABEL_CHARS,)


def test_a_counter_never_goes_down() -> None:
    """``by`` below zero is a programming error (a gauge is what goes down)."""
    with pytest.raises(ValueError, match="only goes up"):
        on().count(TURNS.of("a", "b"), by=-1)


def test_the_catalogue_refuses_two_families_of_one_name() -> None:
    """A family is declared once: a second declaration under the same name is refused when the catalogue is built."""
    again = Counter("clankie_turns_total", "The same name twice.", unlabelled)
    with pytest.raises(ValueError, match="clankie_turns_total"):
        _catalogue(TURNS, again)


def test_a_family_s_label_names_are_its_label_tuple_s_fields() -> None:
    """What the endpoint labels a series with is read from the declaration's label signature, in order."""
    assert (TURNS.name, TURNS.kind, TURNS.labels) == ("clankie_turns_total", "counter", ("outcome", "code"))
    assert (LANES_LIVE.kind, LANES_LIVE.labels) == ("gauge", ())
    assert (TURN_DURATION.kind, TURN_DURATION.labels) == ("histogram", ())
    assert all(FAMILIES[f.name] is f for f in (TURNS, LANES_LIVE, TURN_DURATION, DISCORD_REQUESTS))


def test_every_counter_ends_in_total_and_no_family_has_a_room_user_or_message_label() -> None:
    """Low cardinality by construction: the catalogue itself carries no per-room, per-person or per-message label."""
    for name, fam in FAMILIES.items():
        assert name.startswith("clankie_")
        assert (fam.kind == "counter") == name.endswith("_total"), name
        assert not {"room", "channel", "guild", "user", "author", "message", "lane"} & set(fam.labels), name
        assert (fam.kind == "histogram") == bool(fam.buckets), name
        assert list(fam.buckets) == sorted(fam.buckets), name
