"""What a child counts for the supervisor's Prometheus endpoint: the catalogue of families and the child's :class:`Meter`.

The supervisor serves one endpoint (``CLANKIE_METRICS_LISTEN``,
:mod:`supervisor.metrics`); a child has no server and writes no file. It
counts into its process's :data:`METER` and the link puts a cumulative
:class:`~clankie.protocol.MetricsReport` (everything since the process
started) into every heartbeat; the supervisor adds up a child's lives, so a
restart never sends a counter backwards.

Every family is declared once below as a typed constant (:class:`Counter`,
:class:`Gauge`, :class:`Histogram`) with its name, help and label names, the
labels as a function whose parameters are the family's signature: a call
site names the constant (``METER.count(TURNS.of(outcome, code))``), so a
misspelt family, a gauge counted, or a wrong or missing label fails the type
check, not only at runtime with metrics on (they are off by default).
:data:`FAMILIES` is the catalogue built from those constants, with each
family's type, help and label names: a name not in it is ignored by the
supervisor. Cardinality is low by construction: labels are codes, outcomes
and route templates, never a room, a user or a message, and each family
holds at most :data:`MAX_SERIES` label sets (past that, new ones count under
``other``, so a bug cannot grow the exposition without bound). A label value
is cut to :data:`MAX_LABEL_CHARS`.

While metrics are off (the default) the meter is disabled: every call
returns at once and heartbeats carry no report. :mod:`clankie.observability`
switches it on, once per process.
"""

from __future__ import annotations

import bisect
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Generic, Literal, ParamSpec

from clankie.protocol import HistogramReport, MetricSeries, MetricsReport

Kind = Literal["counter", "gauge", "histogram"]
P = ParamSpec("P")

MAX_SERIES = 64
"""Label sets one family keeps; a new one past this counts under ``other`` in every label."""
MAX_LABEL_CHARS = 64
OTHER = "other"

TURN_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
FIRST_WORDS_BUCKETS = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0, 30.0, 60.0)
MODEL_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0)


class Family:
    """One metric family as the endpoint exposes it (a counter's name ends in ``_total``); declared as one of the
    typed kinds below, never directly."""

    kind: ClassVar[Kind]
    __slots__ = ("buckets", "doc", "help", "labels", "name")

    def __init__(self, name: str, help: str, labels: tuple[str, ...] = (), buckets: tuple[float, ...] = (), *,
                 doc: str = "") -> None:
        self.name = name
        self.help = help  # the exposition's HELP line
        self.labels = labels  # the label names, in order
        self.buckets = buckets  # a histogram's upper bounds, +Inf implied
        self.doc = doc or help  # its row in docs/observability.md's table of series (scripts/gen-docs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


@dataclass(frozen=True, slots=True)
class CounterSeries:
    """One label set of a counter (:meth:`Counter.of`): what :meth:`Meter.count` adds to."""

    family: Counter[...]
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GaugeSeries:
    """One label set of a gauge (:meth:`Gauge.of`): what :meth:`Meter.set` sets."""

    family: Gauge[...]
    values: tuple[str, ...]


def _names(labels: Callable[..., tuple[str, ...]]) -> tuple[str, ...]:
    """A label signature's parameter names, in order (the family's label names)."""
    return tuple(inspect.signature(labels).parameters)


class Counter(Family, Generic[P]):
    """A family that only goes up; ``labels`` is a function of its label names (its series' signature)."""

    kind = "counter"
    __slots__ = ("_labels",)

    def __init__(self, name: str, help: str, labels: Callable[P, tuple[str, ...]], *, doc: str = "") -> None:
        super().__init__(name, help, _names(labels), doc=doc)
        self._labels = labels

    def of(self, *args: P.args, **kwargs: P.kwargs) -> CounterSeries:
        """The series of these label values (positional or by name, as the label signature takes them)."""
        return CounterSeries(self, self._labels(*args, **kwargs))


class Gauge(Family, Generic[P]):
    """A family set to a value; ``labels`` is a function of its label names (its series' signature)."""

    kind = "gauge"
    __slots__ = ("_labels",)

    def __init__(self, name: str, help: str, labels: Callable[P, tuple[str, ...]], *, doc: str = "") -> None:
        super().__init__(name, help, _names(labels), doc=doc)
        self._labels = labels

    def of(self, *args: P.args, **kwargs: P.kwargs) -> GaugeSeries:
        """The series of these label values (positional or by name, as the label signature takes them)."""
        return GaugeSeries(self, self._labels(*args, **kwargs))


class Histogram(Family):
    """A family of observations in fixed buckets (no labels)."""

    kind = "histogram"
    __slots__ = ()

    def __init__(self, name: str, help: str, buckets: tuple[float, ...], *, doc: str = "") -> None:
        super().__init__(name, help, (), buckets, doc=doc)


# ---------------------------------------------------------------- label signatures
# Each is a function whose parameters are a family's label names, in order (a function, not a NamedTuple: defining
# one costs microseconds, a NamedTuple class milliseconds, at every child's start).

Labels = tuple[str, ...]


def unlabelled() -> Labels:
    """A family of one series."""
    return ()


def outcome_code(outcome: str, code: str) -> Labels:
    return (outcome, code)


def route_result(route: str, result: str) -> Labels:
    return (route, result)


def by_route(route: str) -> Labels:
    return (route,)


def token_type(type: str) -> Labels:
    return (type,)


def cap_words(cap: str, words: str) -> Labels:
    return (cap, words)


def by_scope(scope: str) -> Labels:
    return (scope,)


def verdict_reason(verdict: str, reason: str) -> Labels:
    return (verdict, reason)


def route_status(route: str, status_class: str) -> Labels:
    return (route, status_class)


def code_sign(code: str, sign: str) -> Labels:
    return (code, sign)


def by_shard(shard: str) -> Labels:
    return (shard,)


def by_state(state: str) -> Labels:
    return (state,)


def by_how(how: Literal["expired", "handback"]) -> Labels:
    return (how,)


# ---------------------------------------------------------------- the service's families

TURNS = Counter(
    "clankie_turns_total", "Turns ended, by outcome (settled, silent, absorbed, failed, dropped) and failure code.",
    outcome_code, doc="turns ended: `settled`, `silent`, `absorbed`, `failed` (with its code), `dropped` (a poison message "
    "leaves its room, code `captain_session_failed`); a turn cut by shutdown is not counted (the restarted service runs it)")
TURN_DURATION = Histogram("clankie_turn_duration_seconds", "Seconds from a turn's submission to its result.", TURN_BUCKETS,
                          doc="histogram: submission to result")
TURN_FIRST_WORDS = Histogram(
    "clankie_turn_first_words_seconds", "Seconds from a turn's submission to the moment its reply is sure to speak.",
    FIRST_WORDS_BUCKETS, doc="histogram: submission to the moment the reply can no longer be `[[stay-silent]]` (when the "
    "room lights typing); silent and tool-only turns have none")
MODEL_REQUESTS = Counter(
    "clankie_model_requests_total", "Model calls, by route and result (ok or the failure's code).", route_result,
    doc="every model call attempt, by the route it went on (`primary` or a fallback's name, `docs/providers.md`): `ok`, "
    "`rate_limited` (a 429), or the failure's kind (`transient`, `fatal`, `usage_limit`, `truncated`, `context_overflow`)")
MODEL_ROUTE_UP = Gauge("clankie_model_route_up", "1 while a model route takes calls (its breaker closed), else 0.", by_route,
                       doc="1 while a model route takes calls (its breaker closed), else 0")
MODEL_FAILOVERS = Counter("clankie_model_failovers_total", "Times a model route went down and calls moved to the next.",
                          by_route, doc="times a route went down and calls moved to the next route that is up")
MODEL_TOKENS = Counter("clankie_model_tokens_total", "Model tokens, by type (input, output, cache_read, cache_creation).",
                       token_type, doc="`input` (uncached), `output`, `cache_read`, `cache_creation`")
MODEL_REQUEST_DURATION = Histogram("clankie_model_request_duration_seconds", "Seconds one model call took, stream included.",
                                   MODEL_BUCKETS, doc="histogram: one call, stream included")
RUN_CAPS = Counter(
    "clankie_run_caps_total", "Runs stopped at a run cap, by cap (model_calls, tokens, tool_calls) and whether words so "
    "far were the reply (words: yes or no).", cap_words,
    doc="runs stopped at a run cap (docs/spend.md, \"Run caps\"): `cap` is `model_calls`, `tokens` or `tool_calls`; "
    "`words` `yes` when the words so far were the reply (settled with code `captain_run_budget_exceeded`), `no` when the "
    "turn failed")
LANES_LIVE = Gauge("clankie_lanes_live", "Lanes held in the service's memory.", unlabelled, doc="lanes in memory")
LANES_ON_DISK = Gauge("clankie_lanes_on_disk", "Lanes evicted from memory and kept only on disk.", unlabelled,
                      doc="lane directories not in memory (counted by name, at most every 30 s)")
_TREE_ONLY = ("`scope=\"tree\"`, only for a budget that is set (docs/spend.md); per-room and per-person budgets are not "
              "series (a room or a person would be a label): `clankiectl budget` shows them")
BUDGET_REMAINING_TOKENS = Gauge("clankie_budget_remaining_tokens",
                                "Tokens left of today's token budget, only when one is set (scope tree).", by_scope,
                                doc="tokens left of today's token budget, " + _TREE_ONLY)
BUDGET_REMAINING_USD = Gauge("clankie_budget_remaining_usd",
                             "Dollars left of today's dollar budget, only when one is set (scope tree).", by_scope,
                             doc="dollars left of today's dollar budget, " + _TREE_ONLY)
BUDGET_LIMIT_TOKENS = Gauge("clankie_budget_limit_tokens", "Today's token budget, only when one is set (scope tree).",
                            by_scope, doc="today's token budget itself, " + _TREE_ONLY)
BUDGET_LIMIT_USD = Gauge("clankie_budget_limit_usd", "Today's dollar budget, only when one is set (scope tree).", by_scope,
                         doc="today's dollar budget itself, " + _TREE_ONLY)
BUDGET_UNBOUNDED = Gauge(
    "clankie_budget_unbounded", "1 while a scope (tree, room, user) has no day budget in either unit, else 0.", by_scope,
    doc="1 while a scope (`tree`, `room`, `user`) has no day budget in either unit, else 0: a tree left without a tree "
    "budget says so here, in its start log and in `clankiectl status` (docs/spend.md, \"The defaults\")")

SERVICE_FAMILIES: tuple[Family, ...] = (
    TURNS, TURN_DURATION, TURN_FIRST_WORDS, MODEL_REQUESTS, MODEL_ROUTE_UP, MODEL_FAILOVERS, MODEL_TOKENS,
    MODEL_REQUEST_DURATION, RUN_CAPS, LANES_LIVE, LANES_ON_DISK, BUDGET_REMAINING_TOKENS, BUDGET_REMAINING_USD,
    BUDGET_LIMIT_TOKENS, BUDGET_LIMIT_USD, BUDGET_UNBOUNDED,
)
"""What the service counts, in the order the endpoint exposes them."""

# ---------------------------------------------------------------- the bridge's families

INGRESS_MESSAGES = Counter(
    "clankie_ingress_messages_total", "Discord messages the bridge judged, by verdict and drop reason.", verdict_reason,
    doc="every message admission judged: `run`, `buffered`, `waiting`, `paced` (waiting for its author's pace), "
    "`duplicate`, `dropped` (with its reason code, e.g. `guild_not_allowlisted`, `rate_limited`, `self_or_bot_message`)")
DISCORD_REQUESTS = Counter(
    "clankie_discord_requests_total", "Discord REST requests, by route template and status class.", route_status,
    doc="Discord REST calls by route template and final status after discord.py's own retries: `2xx`, `429`, `4xx`, "
    "`5xx`, `error` (no answer)")
JOURNAL_WAITING = Gauge("clankie_journal_waiting", "Messages waiting in the bridge's journal for a turn slot.", unlabelled,
                        doc="messages waiting in the journal for a turn slot")
REFUSAL_SIGNS = Counter(
    "clankie_refusal_signs_total", "Messages refused for backpressure, by code and how the refusal reached its author "
    "(reaction, notice, covered by a recent notice, none).", code_sign,
    doc="messages refused for backpressure (`journal_full`), by how the refusal reached its author: `reaction` (the "
    "failure reaction on it), `notice` (reactions in flight at their bound, or the reaction off: a notice replying to it "
    "in its room), `covered` (a notice in its room within the last five minutes already said it), `none` (notices at "
    "their bound too, or the notice's post failed); a notice is counted once posted; `bridge/refusal_notice.py`")
DISCORD_CONNECTED = Gauge(
    "clankie_discord_connected", "1 while the bridge's Discord gateway session is up, else 0 (absent with no token).",
    unlabelled, doc="1 with a gateway session, 0 without; absent in local-only mode (no token)")
GATEWAY_RESUMES = Counter(
    "clankie_gateway_resumes_total", "Gateway sessions the bridge RESUMEd (a restarted bridge's included).", unlabelled,
    doc="gateway sessions RESUMEd (a restarted bridge's included); docs/bridge.md, \"No deaf window\"")
GATEWAY_IDENTIFIES = Counter(
    "clankie_gateway_identifies_total", "Gateway sessions the bridge started with IDENTIFY (each spends a session start).",
    unlabelled, doc="gateway sessions started anew with IDENTIFY (each spends one of the day's session starts); "
    "docs/bridge.md, \"No deaf window\"")
STALE_EPOCH_WRITES = Counter(
    "clankie_stale_epoch_writes_total",
    "Writes for a shard refused because their lease epoch was stale (the PostgreSQL profile's fencing, "
    "docs/multi-machine.md).", unlabelled,
    doc="writes for a shard refused because they carried a stale lease epoch: a tree that lost a shard's lease "
    "(paused past it, or cut off from the database) tried to write for it; the PostgreSQL profile only, "
    "docs/multi-machine.md")
LEASE_TAKEOVERS = Counter(
    "clankie_lease_takeovers_total",
    "Shards this tree took from another tree, by how: expired (its lease had expired) or handback (released to this "
    "tree, which prefers the shard, at its claim). The PostgreSQL profile (docs/multi-machine.md).", by_how,
    doc="shards this tree took from another tree: `expired` (that tree's lease had expired: it died, hung or was cut "
    "off from the database) or `handback` (the shard is this tree's preferred one and the tree serving it for it "
    "released it at its claim); a planned stop's release taken by the next tree is not counted; the PostgreSQL "
    "profile only, docs/multi-machine.md")
GATEWAY_SESSION_STARTS_REMAINING = Gauge(
    "clankie_gateway_session_starts_remaining", "Session starts Discord says are left today (GET /gateway/bot).",
    unlabelled, doc="session starts Discord says are left today (`GET /gateway/bot`, read at each bridge start)")
DISCORD_SHARD_UP = Gauge(
    "clankie_discord_shard_up", "1 while this tree's gateway session on the shard is up, else 0 (only when sharded).",
    by_shard, doc="under sharding only (`CLANKIE_DISCORD_SHARD_COUNT`, docs/operations.md): 1 for each of this tree's "
    "shards with a gateway session, 0 without")
DISCORD_SHARD_COUNT = Gauge(
    "clankie_discord_shard_count", "The bot's total shard count, CLANKIE_DISCORD_SHARD_COUNT (only when sharded).",
    unlabelled, doc="under sharding only: the bot's total shard count")
SHARD_LEASES = Gauge(
    "clankie_shard_leases", "The shard leases this tree wants, by state: held, or not (waiting for another tree's to "
    "expire, or lost). The PostgreSQL profile only.", by_state,
    doc="the PostgreSQL profile only (docs/multi-machine.md): the shard leases this tree wants, `held` (its gateway "
    "serves them) or `unheld` (another tree holds it, or it was lost and is being taken again)")

BRIDGE_FAMILIES: tuple[Family, ...] = (
    INGRESS_MESSAGES, DISCORD_REQUESTS, JOURNAL_WAITING, REFUSAL_SIGNS, DISCORD_CONNECTED, GATEWAY_RESUMES,
    GATEWAY_IDENTIFIES, STALE_EPOCH_WRITES, LEASE_TAKEOVERS, GATEWAY_SESSION_STARTS_REMAINING, DISCORD_SHARD_UP, DISCORD_SHARD_COUNT,
    SHARD_LEASES,
)
"""What the bridge counts, in the order the endpoint exposes them."""


def _catalogue(*families: Family) -> dict[str, Family]:
    table: dict[str, Family] = {}
    for fam in families:
        if fam.name in table:
            raise ValueError(f"two families named {fam.name}")
        table[fam.name] = fam
    return table


FAMILIES: dict[str, Family] = _catalogue(*SERVICE_FAMILIES, *BRIDGE_FAMILIES)
"""Every family a child may report, by name, in the order the endpoint exposes them (each declared once above)."""


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

    def _key(self, fam: Family, labels: tuple[str, ...]) -> tuple[str, ...]:
        series = self._values.setdefault(fam.name, {})
        key = tuple(_label(v) for v in labels)
        if key not in series and len(series) >= MAX_SERIES:
            key = (OTHER,) * len(labels)
        return key

    def count(self, series: CounterSeries, by: float = 1.0) -> None:
        """Add ``by`` to a counter's series (``TURNS.of(outcome, code)``)."""
        if not self.enabled:
            return
        if by < 0:
            raise ValueError(f"{series.family.name} is a counter; a counter only goes up")
        key = self._key(series.family, series.values)
        values = self._values[series.family.name]
        values[key] = values.get(key, 0.0) + by

    def set(self, series: GaugeSeries, value: float) -> None:
        """Set a gauge's series (``MODEL_ROUTE_UP.of(route)``)."""
        if not self.enabled:
            return
        key = self._key(series.family, series.values)
        self._values[series.family.name][key] = value

    def observe(self, family: Histogram, value: float) -> None:
        """Record one observation in a histogram."""
        if not self.enabled:
            return
        hist = self._histograms.get(family.name)
        if hist is None:
            hist = self._histograms[family.name] = _Histogram(family.buckets, [0] * (len(family.buckets) + 1))
        hist.observe(value)

    def reset(self) -> None:
        """Off, with nothing counted (:func:`clankie.observability.reset`, for tests)."""
        self.enabled = False
        self._values.clear()
        self._histograms.clear()

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
"""This process's meter: enabled by :func:`clankie.observability.configure` when ``CLANKIE_METRICS_LISTEN`` is set."""
