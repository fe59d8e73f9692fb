"""Records between a child and the supervisor over the link."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from clankie.protocol.base import Record


class Caller(Record):
    """Who asked for a control action: the ``SO_PEERCRED`` pid and uid of the process on ``control.sock``, filled
    in by the supervisor (whatever a client sent there is overwritten), for the audit of what the service does."""

    pid: int = Field(ge=0)
    uid: int = Field(ge=0)


class RunReport(Record):
    """A live run as the service sees it; ages are CLOCK_BOOTTIME seconds at send time."""

    lane: str
    run_id: str
    last_event_age_s: float = Field(ge=0)
    started_age_s: float = Field(default=0.0, ge=0)
    turns: int = 0
    paced: bool = False  # its model call is waiting in the provider governor (its age is then 0)


class ProcessSample(Record):
    """What a child measured of its own process (a non-dumpable child's ``/proc`` is closed to the supervisor)."""

    rss_bytes: int | None = Field(default=None, ge=0)
    num_fds: int | None = Field(default=None, ge=0)
    cpu_percent: float | None = Field(default=None, ge=0)  # since its previous heartbeat
    threads: int | None = Field(default=None, ge=0)


class MetricSeries(Record):
    """One series of a counter or gauge family: its label values, in the family's label order."""

    labels: tuple[str, ...] = Field(default=(), max_length=4)
    value: float


class HistogramReport(Record):
    """A histogram's observations since the process started: one count per bucket of its family, +Inf last."""

    counts: tuple[int, ...] = Field(max_length=32)
    sum: float = 0.0


class MetricsReport(Record):
    """A child's metrics since its process started (cumulative; the supervisor adds up its lives).

    Names are families of :data:`clankie.metrics.FAMILIES`; the supervisor ignores any other.
    """

    counters: dict[str, tuple[MetricSeries, ...]] = Field(default_factory=dict, max_length=32)
    gauges: dict[str, tuple[MetricSeries, ...]] = Field(default_factory=dict, max_length=32)
    histograms: dict[str, HistogramReport] = Field(default_factory=dict, max_length=32)


class Heartbeat(Record):
    """``heartbeat`` (child -> supervisor), with a role-specific report."""

    seq: int = 0
    detail: str = Field(default="", max_length=200)
    runs: tuple[RunReport, ...] = ()
    report: dict[str, Any] = Field(default_factory=dict)
    process: ProcessSample | None = None  # filled in by the link on every beat
    metrics: MetricsReport | None = None  # only while CLANKIE_METRICS_LISTEN is set


class Stopping(Record):
    reason: str = Field(default="", max_length=200)


class AbortRun(Record):
    """``abort_run`` (supervisor -> service)."""

    lane: str
    run_id: str | None = None
    reason: Literal["stalled", "operator"] = "operator"
    caller: Caller | None = None  # an operator's abort: who asked (the supervisor fills it in)


class AbortReply(Record):
    aborted: bool


class Tokens(Record):
    """Tokens as the provider bills them: ``input`` is the uncached remainder."""

    input: int = Field(default=0, ge=0)
    cache_read: int = Field(default=0, ge=0)
    cache_write: int = Field(default=0, ge=0)  # every kind of cache write
    output: int = Field(default=0, ge=0)
    cache_write_1h: int = Field(default=0, ge=0)  # the part of cache_write with the 1-hour lifetime

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(input=self.input + other.input, cache_read=self.cache_read + other.cache_read,
                      cache_write=self.cache_write + other.cache_write, output=self.output + other.output,
                      cache_write_1h=self.cache_write_1h + other.cache_write_1h)

    @property
    def billed(self) -> int:
        """Every token billed, whatever its kind (what a token budget counts)."""
        return self.input + self.cache_read + self.cache_write + self.output

    @property
    def read_share(self) -> float | None:
        """The cache-read share of the input tokens (None when there were none)."""
        total = self.input + self.cache_read + self.cache_write
        return self.cache_read / total if total else None


class LanesRequest(Record):
    """``lanes``: every lane, or (``hash``) those whose lane hash starts with it, found among all of them."""

    hash: str | None = Field(default=None, pattern=r"^[0-9a-f]{4,16}$")  # journald's LANE=, traces' conversation id


class LaneInfo(Record):
    key: str
    warm: bool
    state: str
    run_id: str | None = None
    last_event_age_s: float | None = None
    turns: int = 0
    tokens: Tokens | None = None  # everything its session trees record (None: not read)
    live: bool = True  # False: only on disk (evicted, or from an earlier process); state is then "on_disk"
    last_active_age_s: float | None = None  # since its session files were last written (a disk lane's row)
    budget_key: str | None = None  # its room's budget key, room:<guild|dm>/<channel> (live lanes)
    budget_tokens_left: int | None = None  # the room's token budget left today (None: no such budget)
    budget_usd_left: float | None = None  # the room's dollar budget left today (None: no such budget)
    spent_today_tokens: int | None = None  # what the room spent today (every lane of it)
    spent_today_usd: float | None = None
    cache_read_share: float | None = None  # the share of the lane's input tokens read from the prompt cache
    cache_lifetime: str | None = None  # the conversation's cache lifetime its pace chose (5m or 1h)


class BudgetRequest(Record):
    """``budget``: show today's budgets, or raise one for the rest of the day, or reset what a key spent."""

    action: Literal["show", "raise", "reset"] = "show"
    key: str = Field(default="tree", min_length=1, max_length=200)  # tree, room:<guild|dm>/<channel>, user:<id>
    tokens: int | None = Field(default=None, ge=1, le=1 << 50)  # raise: the new token limit
    usd: float | None = Field(default=None, gt=0, le=1e9)  # raise: the new dollar limit
    # raise: no limit at all for the rest of the day, said explicitly (0 no longer means it: issue 37)
    unlimited: bool = Field(default=False, validate_default=True)
    caller: Caller | None = None  # who asked (the supervisor fills it in)

    @field_validator("unlimited")
    @classmethod
    def _one_kind_of_raise(cls, unlimited: bool, info: ValidationInfo) -> bool:
        limits = [info.data.get("tokens"), info.data.get("usd")]
        if unlimited and info.data.get("action") != "raise":
            raise ValueError("only a raise can be unlimited")
        if unlimited and any(v is not None for v in limits):
            raise ValueError("either --unlimited or a limit (--tokens, --usd), not both")
        if info.data.get("action") == "raise" and not unlimited and all(v is None for v in limits):
            raise ValueError("a raise needs --tokens N, --usd N or --unlimited")
        return unlimited


class BudgetInfo(Record):
    """One budget today: what its key spent, its limits (0: none) and what is left (None: no limit)."""

    key: str
    spent_tokens: int = 0
    spent_usd: float = 0.0
    limit_tokens: int = 0
    limit_usd: float = 0.0
    tokens_left: int | None = None
    usd_left: float | None = None


class BudgetReply(Record):
    day: str  # the UTC day, YYYY-MM-DD
    budgets: tuple[BudgetInfo, ...] = ()
    message: str = ""


class LanesReply(Record):
    lanes: tuple[LaneInfo, ...] = ()


class SayRequest(Record):
    """``say``: an operator turn through the service without Discord."""

    room: str = Field(min_length=1, max_length=200)
    text: str = Field(min_length=1, max_length=8000)
    caller: Caller | None = None  # who asked (the supervisor fills it in)
