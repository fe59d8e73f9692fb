"""clankie.observability: a process's switches of what it reports are set once from its settings (the meter, then its
own parts, in order) and all go back to their defaults with one reset."""

from __future__ import annotations

from collections.abc import Mapping

from clankie import observability
from clankie.metrics import METER, TURNS
from clankie.observability import Part
from clankie.settings import Settings, load


class Switch:
    """A part's switch: what it was set from, and every set and reset, in order, in a shared log."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def configure(self, settings: Settings, environ: Mapping[str, str]) -> None:
        self.log.append(f"{self.name} {settings.log_level} {environ.get('CLANKIE_TREE_ID')}")

    def reset(self) -> None:
        self.log.append(f"{self.name} reset")

    def part(self) -> Part:
        return Part(self.name, self.configure, self.reset)


def test_the_meter_is_on_exactly_when_the_supervisor_serves_metrics() -> None:
    """CLANKIE_METRICS_LISTEN set: counting is on; unset: off (and a call costs nothing)."""
    observability.configure(load({"HOME": "/h", "CLANKIE_METRICS_LISTEN": "127.0.0.1:9464"}))
    assert METER.enabled
    observability.configure(load({"HOME": "/h"}))
    assert not METER.enabled


def test_each_part_is_set_from_the_settings_and_environment_in_order() -> None:
    """The process's own switches see this life's settings and environment, after the meter, in the order given."""
    log: list[str] = []
    parts = (Switch("tracing", log).part(), Switch("records", log).part())
    observability.configure(load({"HOME": "/h", "CLANKIE_LOG_LEVEL": "DEBUG"}), {"CLANKIE_TREE_ID": "t1"}, parts)
    assert log == ["tracing DEBUG t1", "records DEBUG t1"]


def test_reset_turns_the_meter_off_empty_and_resets_each_configured_part_once_last_first() -> None:
    """What a test switched on does not reach the next: the meter forgets its counts, and every part set (even twice)
    is reset once, in reverse order; a second reset has nothing left to do."""
    log: list[str] = []
    tracing, records = Switch("tracing", log).part(), Switch("records", log).part()
    settings = load({"HOME": "/h", "CLANKIE_METRICS_LISTEN": "127.0.0.1:9464"})
    observability.configure(settings, {}, (tracing, records))
    observability.configure(settings, {}, (tracing,))
    METER.count(TURNS.of("settled", ""))
    assert METER.report() is not None
    log.clear()
    observability.reset()
    assert log == ["records reset", "tracing reset"]
    assert not METER.enabled and METER.report() is None
    METER.enabled = True
    report = METER.report()
    assert report is not None and report.counters == {}
    METER.enabled = False
    observability.reset()
    assert log == ["records reset", "tracing reset"]
