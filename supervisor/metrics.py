"""The tree's Prometheus endpoint: what the children report over their links, added up, plus the supervisor's own.

With ``CLANKIE_METRICS_LISTEN`` set the supervisor serves ``GET /metrics``
on that address (Prometheus text or OpenMetrics, as the scraper's
``Accept`` asks; ``prometheus_client`` writes both). Nothing else listens:
a child counts into its :data:`clankie.metrics.METER` and sends the totals
in its heartbeat (:mod:`clankie.metrics`).

:class:`Lives` is the pure part: one child's reports across its processes.
A report holds everything since its process started, so a new pid means a
new life: the last report of the one before is added to the finished total
and the counters never go backwards (what a process counted after its last
heartbeat, at most one interval, dies with it). Gauges come from the live
process only.

The supervisor's own series (restarts by reason, up, fatal, spare takeovers,
watchdog aborts, each child's memory and open fds as the child measured
them, the build) are read from the tree at scrape time. Every restart reason
of every child is exported from the first scrape, at 0 until it happens, so
``increase()`` sees a child's first crash (a series born at 1 would hide it). Scrapes run on the supervisor's loop, so they see
one consistent tree.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from clankie.metrics import FAMILIES, MAX_SERIES, Counter, Family, Gauge
from clankie.protocol import HistogramReport, MetricsReport
from clankie.version import revision, version
from supervisor.lifecycle import RESTART_REASONS, Lifecycle, State
from supervisor.metric_families import (
    BUILD_INFO,
    CHILD_FATAL,
    CHILD_OPEN_FDS,
    CHILD_RESIDENT_BYTES,
    CHILD_RESTARTS,
    CHILD_UP,
    SPARE_TAKEOVERS,
    WATCHDOG_ABORTS,
)
from supervisor.metrics_port import Port

log = logging.getLogger(__name__)

Labels = tuple[str, ...]


def _counter(fam: Counter[...]) -> CounterMetricFamily:
    return CounterMetricFamily(fam.name, fam.help, labels=fam.labels)


def _gauge(fam: Gauge[...]) -> GaugeMetricFamily:
    return GaugeMetricFamily(fam.name, fam.help, labels=fam.labels)


@dataclass
class _Hist:
    counts: list[int]
    total: float = 0.0

    def add(self, report: HistogramReport) -> None:
        for i, n in enumerate(report.counts[: len(self.counts)]):
            self.counts[i] += n
        self.total += report.sum


def _known(name: str, kind: str) -> Family | None:
    fam = FAMILIES.get(name)
    return fam if fam is not None and fam.kind == kind else None


def _series(rows: Iterable[tuple[Labels, float]], fam: Family) -> Iterator[tuple[Labels, float]]:
    for labels, value in rows:
        if len(labels) == len(fam.labels):
            yield labels, value


@dataclass
class Lives:
    """One child's metrics across its processes (pure): finished lives added up, plus the live one's last report."""

    finished: dict[str, dict[Labels, float]] = field(default_factory=dict)
    finished_hist: dict[str, _Hist] = field(default_factory=dict)
    pid: int | None = None
    last: MetricsReport | None = None

    def observe(self, pid: int, report: MetricsReport) -> None:
        """The report in a heartbeat of process ``pid`` (a new pid ends the life before it)."""
        if pid != self.pid:
            self.end()
            self.pid = pid
        self.last = report

    def end(self) -> None:
        """The live process is gone: its last report joins the finished lives; its gauges go."""
        last, self.last, self.pid = self.last, None, None
        if last is None:
            return
        for name, rows in last.counters.items():
            fam = _known(name, "counter")
            if fam is None:
                continue
            done = self.finished.setdefault(name, {})
            for labels, value in _series(((r.labels, r.value) for r in rows), fam):
                if labels in done or len(done) < MAX_SERIES:
                    done[labels] = done.get(labels, 0.0) + value
        for name, hist in last.histograms.items():
            fam = _known(name, "histogram")
            if fam is None:
                continue
            self.finished_hist.setdefault(name, _Hist([0] * (len(fam.buckets) + 1))).add(hist)

    def counters(self) -> dict[str, dict[Labels, float]]:
        out = {name: dict(rows) for name, rows in self.finished.items()}
        if self.last is not None:
            for name, rows in self.last.counters.items():
                fam = _known(name, "counter")
                if fam is None:
                    continue
                into = out.setdefault(name, {})
                for labels, value in _series(((r.labels, r.value) for r in rows), fam):
                    if labels in into or len(into) < MAX_SERIES:
                        into[labels] = into.get(labels, 0.0) + value
        return out

    def gauges(self) -> dict[str, dict[Labels, float]]:
        out: dict[str, dict[Labels, float]] = {}
        if self.last is not None:
            for name, rows in self.last.gauges.items():
                fam = _known(name, "gauge")
                if fam is not None:
                    out[name] = dict(list(_series(((r.labels, r.value) for r in rows), fam))[:MAX_SERIES])
        return out

    def histograms(self) -> dict[str, _Hist]:
        out = {name: _Hist(list(h.counts), h.total) for name, h in self.finished_hist.items()}
        if self.last is not None:
            for name, hist in self.last.histograms.items():
                fam = _known(name, "histogram")
                if fam is not None:
                    out.setdefault(name, _Hist([0] * (len(fam.buckets) + 1))).add(hist)
        return out


def _bucket_label(bound: float) -> str:
    return f"{bound:g}"


class MeteredChild(Protocol):
    """A child slot as the collector reads it (:class:`supervisor.process.Child`)."""

    @property
    def life(self) -> Lifecycle: ...

    @property
    def metrics(self) -> Lives: ...

    @property
    def spare_takeovers(self) -> int: ...

    def stats(self) -> dict[str, float | int | None]: ...


class MeteredTree(Protocol):
    """The tree as the collector reads it (:class:`supervisor.tree.Tree`)."""

    @property
    def children(self) -> Mapping[str, MeteredChild]: ...

    @property
    def order(self) -> Sequence[str]: ...

    @property
    def watchdog_aborts(self) -> int: ...


class TreeCollector(Collector):
    """Every family of the tree, read at scrape time from the supervisor's children."""

    def __init__(self, tree: MeteredTree) -> None:
        self.tree = tree

    def collect(self) -> Iterator[Metric]:
        children = [self.tree.children[n] for n in self.tree.order]
        counters: dict[str, dict[Labels, float]] = {}
        gauges: dict[str, dict[Labels, float]] = {}
        hists: dict[str, _Hist] = {}
        for child in children:
            for name, rows in child.metrics.counters().items():
                into = counters.setdefault(name, {})
                for labels, value in rows.items():
                    into[labels] = into.get(labels, 0.0) + value
            for name, rows in child.metrics.gauges().items():
                gauges.setdefault(name, {}).update(rows)
            for name, hist in child.metrics.histograms().items():
                got = hists.get(name)
                if got is None:
                    hists[name] = hist
                else:
                    got.counts = [a + b for a, b in zip(got.counts, hist.counts, strict=True)]
                    got.total += hist.total
        for name, fam in FAMILIES.items():
            if fam.kind == "counter":
                c = CounterMetricFamily(name, fam.help, labels=fam.labels)
                for labels, value in counters.get(name, {}).items():
                    c.add_metric(labels, value)
                yield c
            elif fam.kind == "gauge":
                g = GaugeMetricFamily(name, fam.help, labels=fam.labels)
                for labels, value in gauges.get(name, {}).items():
                    g.add_metric(labels, value)
                yield g
            else:
                h = HistogramMetricFamily(name, fam.help)
                got = hists.get(name)
                counts = got.counts if got is not None else [0] * (len(fam.buckets) + 1)
                running, buckets = 0, []
                for bound, n in zip((*map(_bucket_label, fam.buckets), "+Inf"), counts, strict=True):
                    running += n
                    buckets.append((bound, float(running)))
                h.add_metric([], buckets, got.total if got is not None else 0.0)
                yield h
        yield from self._own()

    def _own(self) -> Iterator[Metric]:
        restarts, up, fatal = _counter(CHILD_RESTARTS), _gauge(CHILD_UP), _gauge(CHILD_FATAL)
        takeovers, rss, fds = _counter(SPARE_TAKEOVERS), _gauge(CHILD_RESIDENT_BYTES), _gauge(CHILD_OPEN_FDS)
        for name in self.tree.order:
            child = self.tree.children[name]
            for reason in RESTART_REASONS:
                restarts.add_metric([name, reason], float(child.life.restarts_by.get(reason, 0)))
            up.add_metric([name], 1.0 if child.life.state is State.RUNNING else 0.0)
            fatal.add_metric([name], 1.0 if child.life.state is State.FATAL else 0.0)
            takeovers.add_metric([name], float(child.spare_takeovers))
            stats = child.stats()
            if stats["rss_bytes"] is not None:
                rss.add_metric([name], float(stats["rss_bytes"]))
            if stats["num_fds"] is not None:
                fds.add_metric([name], float(stats["num_fds"]))
        aborts = _counter(WATCHDOG_ABORTS)
        aborts.add_metric([], float(self.tree.watchdog_aborts))
        build = _gauge(BUILD_INFO)
        build.add_metric([version(), revision()], 1.0)
        yield from (restarts, up, fatal, takeovers, aborts, rss, fds, build)


def registry_for(tree: MeteredTree) -> CollectorRegistry:
    """The tree's families, and the supervisor's own process figures (``process_*``)."""
    from prometheus_client import ProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(TreeCollector(tree))
    ProcessCollector(registry=registry)  # the supervisor's own cpu and memory
    return registry


def exposition(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """The body and content type for one scrape, in the format ``accept`` asks for."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


class MetricsServer:
    """``GET /metrics`` on ``CLANKIE_METRICS_LISTEN``, on a port no flood can turn against the supervisor
    (:mod:`supervisor.metrics_port`: a connection cap, a header-read timeout, one log line per flood)."""

    def __init__(self, listen: str, registry: CollectorRegistry, *, max_connections: int = 16,
                 header_seconds: float = 10.0) -> None:
        self.registry = registry
        self.port = Port(listen, lambda accept: exposition(registry, accept), max_connections=max_connections,
                         header_seconds=header_seconds)
        registry.register(self.port.collector())
        self.host = self.port.host

    @property
    def scrapes(self) -> int:
        return self.port.scrapes

    async def start(self) -> None:
        await self.port.start()

    async def close(self) -> None:
        await self.port.close()
