"""supervisor.metrics: a child's lives are added up (counters never go back), gauges are the live process's, and the
exposition of a whole tree passes ``promtool check metrics``."""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from clankie.errors import ConfigError
from clankie.metrics import FAMILIES, LANES_LIVE, MAX_SERIES, TURN_DURATION, TURNS, Meter
from clankie.protocol import MetricSeries, MetricsReport
from supervisor.lifecycle import Exit, Lifecycle, State
from supervisor.metric_families import CONNECTIONS_DROPPED, SUPERVISOR_FAMILIES
from supervisor.metrics import Lives, MeteredChild, MetricsServer, exposition, registry_for

PROMTOOL = shutil.which("promtool")


def report(turns: float, *, live: float | None = None, durations: Sequence[float] = ()) -> MetricsReport:
    meter = Meter(enabled=True)
    meter.count(TURNS.of("settled", ""), by=turns)
    for seconds in durations:
        meter.observe(TURN_DURATION, seconds)
    if live is not None:
        meter.set(LANES_LIVE.of(), live)
    got = meter.report()
    assert got is not None
    return got


def settled(lives: Lives) -> float:
    return lives.counters()["clankie_turns_total"][("settled", "")]


def test_a_new_process_adds_its_counts_to_the_lives_before_it() -> None:
    """5 turns, a restart, 2 more: 7, and never fewer in between."""
    lives = Lives()
    lives.observe(100, report(3))
    lives.observe(100, report(5))
    assert settled(lives) == 5
    lives.observe(200, report(0))  # the new process's first beat
    assert settled(lives) == 5
    lives.observe(200, report(2))
    assert settled(lives) == 7


def test_an_ended_life_keeps_its_counters_and_loses_its_gauges() -> None:
    """The child died: its turns still count, its lanes are no longer live."""
    lives = Lives()
    lives.observe(100, report(4, live=9, durations=(1.0, 2.0)))
    assert lives.gauges() == {"clankie_lanes_live": {(): 9.0}}
    lives.end()
    assert lives.gauges() == {}
    assert settled(lives) == 4
    assert sum(lives.histograms()["clankie_turn_duration_seconds"].counts) == 2
    lives.observe(200, report(1, durations=(4.0,)))
    assert settled(lives) == 5
    hist = lives.histograms()["clankie_turn_duration_seconds"]
    assert sum(hist.counts) == 3 and hist.total == 7.0


def test_families_outside_the_catalogue_and_series_past_the_bound_are_ignored() -> None:
    """A report can only add catalogue families, at most MAX_SERIES label sets each, with the family's label count."""
    rows = tuple(MetricSeries(labels=(f"r{i}", "2xx"), value=1.0) for i in range(MAX_SERIES + 10))
    bogus = MetricsReport(counters={"clankie_discord_requests_total": rows,
                                    "evil_total": (MetricSeries(labels=(), value=1.0),),
                                    "clankie_turns_total": (MetricSeries(labels=("one",), value=1.0),)},
                          gauges={"clankie_turns_total": (MetricSeries(value=3.0),)})
    lives = Lives()
    lives.observe(1, bogus)
    counters = lives.counters()
    assert set(counters) == {"clankie_discord_requests_total", "clankie_turns_total"}
    assert len(counters["clankie_discord_requests_total"]) == MAX_SERIES
    assert counters["clankie_turns_total"] == {}
    assert lives.gauges() == {}
    lives.end()
    assert len(lives.counters()["clankie_discord_requests_total"]) == MAX_SERIES


@dataclass
class FakeChild:
    life: Lifecycle
    metrics: Lives = field(default_factory=Lives)
    spare_takeovers: int = 0
    rss: int | None = 50_000_000

    def stats(self) -> dict[str, float | int | None]:
        return {"cpu_percent": 1.0, "rss_bytes": self.rss, "num_fds": 12 if self.rss else None, "threads": 3}


@dataclass
class FakeTree:
    kids: dict[str, FakeChild]
    watchdog_aborts: int = 0

    @property
    def children(self) -> Mapping[str, MeteredChild]:
        return self.kids

    @property
    def order(self) -> Sequence[str]:
        return list(self.kids)


def tree() -> FakeTree:
    service = FakeChild(Lifecycle())
    service.life.start(0.0)
    service.life.ready(1.0)
    service.metrics.observe(10, report(2, live=1, durations=(0.7,)))
    bridge = FakeChild(Lifecycle(), rss=None, spare_takeovers=0)
    return FakeTree({"service": service, "bridge": bridge}, watchdog_aborts=1)


def test_the_exposition_has_every_catalogue_family_and_the_supervisors_own() -> None:
    """Children's families (zero when unreported), restarts, up, takeovers, watchdog aborts, memory and fds by child."""
    t = tree()
    assert t.kids["service"].life.state is State.RUNNING
    body, content_type = exposition(registry_for(t), None)
    text = body.decode()
    assert content_type.startswith("text/plain")
    for name, fam in FAMILIES.items():
        assert f"# TYPE {name} {fam.kind}" in text, name
    assert 'clankie_turns_total{code="",outcome="settled"} 2.0' in text
    assert 'clankie_turn_duration_seconds_bucket{le="1"} 1.0' in text
    assert 'clankie_turn_duration_seconds_bucket{le="+Inf"} 1.0' in text
    assert 'clankie_child_up{child="service"} 1.0' in text and 'clankie_child_up{child="bridge"} 0.0' in text
    assert 'clankie_child_resident_bytes{child="service"} 5e+07' in text
    assert 'clankie_child_resident_bytes{child="bridge"}' not in text  # no figure yet: no sample, not a zero
    assert "clankie_watchdog_aborts_total 1.0" in text
    assert "process_cpu_seconds_total" in text  # the supervisor's own


def test_every_family_the_supervisor_serves_is_declared_once_as_served() -> None:
    """The tree's exposition holds exactly the children's catalogue and the supervisor's declared families (the port's
    is served by the port), each with its declared kind and help: the docs' table of series is rendered from the same
    declarations (scripts/gen-docs)."""
    served = {(m.name + "_total" if m.type == "counter" else m.name, m.type, m.documentation)
              for m in registry_for(tree()).collect() if m.name.startswith("clankie_")}
    declared = {(f.name, f.kind, f.help) for f in (*FAMILIES.values(), *SUPERVISOR_FAMILIES) if f is not CONNECTIONS_DROPPED}
    assert served == declared


def test_openmetrics_is_served_to_a_scraper_that_asks_for_it() -> None:
    body, content_type = exposition(registry_for(tree()), "application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.decode().endswith("# EOF\n")


def test_promtool_accepts_the_exposition() -> None:
    """``promtool check metrics`` (Debian's prometheus package) finds no problem, lint included."""
    assert PROMTOOL is not None, "Debian's prometheus package: scripts/bootstrap installs it"
    body, _ = exposition(registry_for(tree()), None)
    done = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True, timeout=30)
    assert done.returncode == 0, (done.stdout + done.stderr).decode()


def test_an_address_the_endpoint_cannot_take_is_a_configuration_error() -> None:
    """A port already taken: ConfigError naming CLANKIE_METRICS_LISTEN (the supervisor exits 78 before any child starts)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        async def start() -> None:
            await MetricsServer(f"127.0.0.1:{port}", registry_for(tree())).start()

        with pytest.raises(ConfigError, match=r"CLANKIE_METRICS_LISTEN: cannot listen on 127\.0\.0\.1:"):
            asyncio.run(start())


def test_restarts_are_counted_by_reason_every_reason_from_the_first_scrape() -> None:
    """A crash, a watchdog kill and an operator restart land under their own reason; the rest are exported at 0;
    fatal is its own gauge; the build is one info series."""
    t = tree()
    life = t.kids["service"].life
    life.exit(Exit(code=1, signal=None, at=2.0), 2.0)  # a crash
    life.start(3.0)
    life.ready(3.5)
    life.kill("heartbeat", now=4.0)  # the watchdog's kill
    life.exit(Exit(code=None, signal=9, at=4.5), 4.5)
    life.start(5.0)
    life.ready(5.5)
    life.kill("restart", counts_as_crash=False, now=6.0)  # the operator's restart
    life.exit(Exit(code=0, signal=None, at=6.5), 6.5)
    life.start(6.5)
    text = exposition(registry_for(t), None)[0].decode()
    for reason, n in (("crash", 1), ("watchdog", 1), ("operator", 1), ("spawn_error", 0)):
        assert f'clankie_child_restarts_total{{child="service",reason="{reason}"}} {n}.0' in text, reason
        assert f'clankie_child_restarts_total{{child="bridge",reason="{reason}"}} 0.0' in text, reason
    assert 'clankie_child_fatal{child="service"} 0.0' in text
    assert re.search(r'^clankie_build_info\{revision="(?:[0-9a-f]{40}|unknown)",version="[^"]+"\} 1\.0$', text, re.M), text
    for _ in range(11):  # the restart intensity spent: fatal at once
        life.exit(Exit(code=1, signal=None, at=7.0), 7.0)
        if life.state is State.FATAL:
            break
        life.start(7.0)
    text = exposition(registry_for(t), None)[0].decode()
    assert 'clankie_child_fatal{child="service"} 1.0' in text
