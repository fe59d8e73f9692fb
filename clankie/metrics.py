"""What a child counts for the supervisor's Prometheus endpoint: the catalogue of families and the child's :class:`Meter`.

The supervisor serves one endpoint (``CLANKIE_METRICS_LISTEN``,
:mod:`supervisor.metrics`); a child has no server and writes no file. It
counts into its process's :data:`METER` and the link puts a cumulative
:class:`~clankie.protocol.MetricsReport` (everything since the process
started) into every heartbeat; the supervisor adds up a child's lives, so a
restart never sends a counter backwards.

:data:`FAMILIES` is the one list of what may be reported, with each
family's type, help and label names: a name not in it is a programming
error here and ignored by the supervisor. Cardinality is low by
construction: labels are codes, outcomes and route templates, never a room,
a user or a message, and each family holds at most :data:`MAX_SERIES` label
sets (past that, new ones count under ``other``, so a bug cannot grow the
exposition without bound). A label value is cut to :data:`MAX_LABEL_CHARS`.

While metrics are off (the default) the meter is disabled: every call
returns at once and heartbeats carry no report.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Literal

from clankie.protocol import HistogramReport, MetricSeries, MetricsReport

Kind = Literal["counter", "gauge", "histogram"]

MAX_SERIES = 64
"""Label sets one family keeps; a new one past this counts under ``other`` in every label."""
MAX_LABEL_CHARS = 64
OTHER = "other"

TURN_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
FIRST_WORDS_BUCKETS = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0, 30.0, 60.0)
MODEL_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0)


@dataclass(frozen=True)
class Family:
    """One metric family as the endpoint exposes it (a counter's name ends in ``_total``)."""

    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()  # a histogram's upper bounds, +Inf implied


FAMILIES: dict[str, Family] = {
    # the service
    "clankie_turns_total": Family("counter", "Turns ended, by outcome (settled, silent, absorbed, failed, dropped) and failure code.",
                                  ("outcome", "code")),
    "clankie_turn_duration_seconds": Family("histogram", "Seconds from a turn's submission to its result.", buckets=TURN_BUCKETS),
    "clankie_turn_first_words_seconds": Family("histogram", "Seconds from a turn's submission to the moment its reply is sure to speak.",
                                               buckets=FIRST_WORDS_BUCKETS),
    "clankie_model_requests_total": Family("counter", "Model calls, by route and result (ok or the failure's code).",
                                           ("route", "result")),
    "clankie_model_route_up": Family("gauge", "1 while a model route takes calls (its breaker closed), else 0.", ("route",)),
    "clankie_model_failovers_total": Family("counter", "Times a model route went down and calls moved to the next.",
                                            ("route",)),
    "clankie_model_tokens_total": Family("counter", "Model tokens, by type (input, output, cache_read, cache_creation).", ("type",)),
    "clankie_model_request_duration_seconds": Family("histogram", "Seconds one model call took, stream included.",
                                                     buckets=MODEL_BUCKETS),
    "clankie_run_caps_total": Family("counter", "Runs stopped at a run cap, by cap (model_calls, tokens, tool_calls) and "
                                     "whether words so far were the reply (words: yes or no).", ("cap", "words")),
    "clankie_lanes_live": Family("gauge", "Lanes held in the service's memory."),
    "clankie_lanes_on_disk": Family("gauge", "Lanes evicted from memory and kept only on disk."),
    "clankie_budget_remaining_tokens": Family("gauge", "Tokens left of today's token budget, only when one is set (scope tree).",
                                              ("scope",)),
    "clankie_budget_remaining_usd": Family("gauge", "Dollars left of today's dollar budget, only when one is set (scope tree).",
                                           ("scope",)),
    "clankie_budget_limit_tokens": Family("gauge", "Today's token budget, only when one is set (scope tree).", ("scope",)),
    "clankie_budget_limit_usd": Family("gauge", "Today's dollar budget, only when one is set (scope tree).", ("scope",)),
    "clankie_budget_unbounded": Family("gauge", "1 while a scope (tree, room, user) has no day budget in either unit, else 0.",
                                       ("scope",)),
    # the bridge
    "clankie_ingress_messages_total": Family("counter", "Discord messages the bridge judged, by verdict and drop reason.",
                                             ("verdict", "reason")),
    "clankie_discord_requests_total": Family("counter", "Discord REST requests, by route template and status class.",
                                             ("route", "status_class")),
    "clankie_journal_waiting": Family("gauge", "Messages waiting in the bridge's journal for a turn slot."),
    "clankie_refusal_signs_total": Family("counter", "Messages refused for backpressure, by code and how the refusal reached "
                                          "its author (reaction, notice, covered by a recent notice, none).", ("code", "sign")),
    "clankie_discord_connected": Family("gauge", "1 while the bridge's Discord gateway session is up, else 0 (absent with no token)."),
    "clankie_gateway_resumes_total": Family("counter", "Gateway sessions the bridge RESUMEd (a restarted bridge's included)."),
    "clankie_gateway_identifies_total": Family("counter",
                                               "Gateway sessions the bridge started with IDENTIFY (each spends a session start)."),
    "clankie_stale_epoch_writes_total": Family("counter", "Writes for a shard refused because their lease epoch was stale "
                                               "(the PostgreSQL profile's fencing, docs/multi-machine.md)."),
    "clankie_gateway_session_starts_remaining": Family("gauge",
                                                       "Session starts Discord says are left today (GET /gateway/bot)."),
    "clankie_discord_shard_up": Family("gauge", "1 while this tree's gateway session on the shard is up, else 0 (only when sharded).",
                                       ("shard",)),
    "clankie_discord_shard_count": Family("gauge", "The bot's total shard count, CLANKIE_DISCORD_SHARD_COUNT (only when sharded)."),
}


def family(name: str) -> Family:
    """The family named ``name``; a name outside the catalogue is a programming error (``KeyError``)."""
    return FAMILIES[name]


def _label(value: str) -> str:
    return value[:MAX_LABEL_CHARS]


@dataclass
class _Histogram:
    bounds: tuple[float, ...]
    counts: list[int]
    total: float = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value


@dataclass
class Meter:
    """A child process's counters, gauges and histograms (pure: no clock, no I/O); see the module docstring."""

    enabled: bool = False
    _values: dict[str, dict[tuple[str, ...], float]] = field(default_factory=dict)
    _histograms: dict[str, _Histogram] = field(default_factory=dict)

    def _key(self, name: str, labels: tuple[str, ...], fam: Family) -> tuple[str, ...]:
        if len(labels) != len(fam.labels):
            raise ValueError(f"{name} takes labels {fam.labels}, got {len(labels)} values")
        series = self._values.setdefault(name, {})
        key = tuple(_label(v) for v in labels)
        if key not in series and len(series) >= MAX_SERIES:
            key = (OTHER,) * len(labels)
        return key

    def count(self, name: str, *labels: str, by: float = 1.0) -> None:
        """Add ``by`` to a counter's series."""
        if not self.enabled:
            return
        fam = family(name)
        if fam.kind != "counter" or by < 0:
            raise ValueError(f"{name} is a {fam.kind}; a counter only goes up")
        key = self._key(name, labels, fam)
        series = self._values[name]
        series[key] = series.get(key, 0.0) + by

    def set(self, name: str, value: float, *labels: str) -> None:
        """Set a gauge's series."""
        if not self.enabled:
            return
        fam = family(name)
        if fam.kind != "gauge":
            raise ValueError(f"{name} is a {fam.kind}, not a gauge")
        key = self._key(name, labels, fam)
        self._values[name][key] = value

    def observe(self, name: str, value: float) -> None:
        """Record one observation in a histogram."""
        if not self.enabled:
            return
        fam = family(name)
        if fam.kind != "histogram":
            raise ValueError(f"{name} is a {fam.kind}, not a histogram")
        hist = self._histograms.get(name)
        if hist is None:
            hist = self._histograms[name] = _Histogram(fam.buckets, [0] * (len(fam.buckets) + 1))
        hist.observe(value)

    def report(self) -> MetricsReport | None:
        """Everything since this process started, for the next heartbeat (None while disabled)."""
        if not self.enabled:
            return None
        counters: dict[str, tuple[MetricSeries, ...]] = {}
        gauges: dict[str, tuple[MetricSeries, ...]] = {}
        for name, series in self._values.items():
            rows = tuple(MetricSeries(labels=k, value=v) for k, v in series.items())
            (counters if FAMILIES[name].kind == "counter" else gauges)[name] = rows
        hists = {name: HistogramReport(counts=tuple(h.counts), sum=h.total) for name, h in self._histograms.items()}
        return MetricsReport(counters=counters, gauges=gauges, histograms=hists)


METER = Meter()
"""This process's meter: enabled by :func:`clankie.entry.run_child` when ``CLANKIE_METRICS_LISTEN`` is set."""
