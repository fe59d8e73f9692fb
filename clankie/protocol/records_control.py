"""Records between clankiectl and the supervisor over control.sock."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from clankie.protocol.base import Record
from clankie.protocol.records_child import Tokens


class ExitInfo(Record):
    """How a child's last process ended: ``code`` or ``signal`` (a name such as ``SIGKILL``)."""

    code: int | None = None
    signal: str | None = None
    at: float
    core: bool = False


class ChildStatus(Record):
    """One child in ``status`` (ARCHITECTURE §9: these keys are a contract)."""

    name: str
    state: str
    pid: int | None = None
    uptime_s: float | None = None
    restarts: int = 0
    last_exit: ExitInfo | None = None
    next_start_at: float | None = None
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    num_fds: int | None = None
    detail: str = ""
    threads: int | None = None
    reason: str = ""
    ended: str = ""
    ready: bool = False
    last_heartbeat_age_s: float | None = None
    attachment_root: str | None = None  # what the live process said in its link hello
    spare: str = ""  # the warm spare: off / warming / parked pid N / backoff (why)
    spare_pid: int | None = None
    waiting: str = ""  # in backoff: why it waits (crashes in a row) or that it did not
    log_error: str = ""  # why its log file cannot be written right now (a full disk), "" when it can
    restart_reason: str = ""  # why it was last started again: crash, watchdog, spawn_error or operator ("" before any)
    restarts_by: dict[str, int] = Field(default_factory=dict)  # restarts by that reason since the supervisor started


class SupervisorInfo(Record):
    pid: int
    uptime_s: float
    state: str
    ready: bool = False
    stderr_dropped: int = 0  # forwarded lines dropped because the supervisor's stderr was too slow
    disk: str = ""  # the state filesystem is full or a child's log cannot be written; "" when all is well
    store: str = Field(default="", max_length=300)  # "" (files) or "postgres (<the DSN without its password>)"


class StatusReply(Record):
    supervisor: SupervisorInfo
    children: tuple[ChildStatus, ...] = ()
    tokens_today: Tokens | None = None  # every lane's spend on the current UTC day, from the session trees
    tokens_day: str | None = None  # that day, YYYY-MM-DD


class ChildTarget(Record):
    """``start`` / ``stop`` / ``restart``: a child name or ``all``."""

    name: str = Field(min_length=1, max_length=32)


class ControlReply(Record):
    ok: bool
    message: str = ""
    children: tuple[ChildStatus, ...] = ()


class LogsRequest(Record):
    """``logs``: the last ``lines`` lines, or (``offset`` set) what follows ``offset``."""

    name: str = Field(min_length=1, max_length=32)
    lines: int = Field(default=50, ge=0, le=100_000)
    offset: int | None = Field(default=None, ge=0)
    wait: float = Field(default=0.0, ge=0, le=30)


class LogsReply(Record):
    data: bytes = b""
    offset: int = 0


class ResolveRequest(Record):
    """``resolve_artifact`` (supervisor -> bridge): resolve a ref exactly as a reply would."""

    ref: str = Field(min_length=1, max_length=512)


class ResolveReply(Record):
    ok: bool
    code: str | None = None
    size: int = 0


class DoctorCheck(Record):
    """One (writer host -> reader) pair of ``doctor``: a probe written by one, resolved by the other."""

    writer: str
    reader: str
    ok: bool
    code: str | None = None
    ref: str | None = None
    writer_root: str | None = None
    reader_root: str | None = None


class HealthCheck(Record):
    """One line of ``doctor``'s health check: what was looked at, ok/warn/fail, what was seen, and the fix."""

    name: str = Field(max_length=64)  # child:<name>, metrics, provider, discord, disk, budget, store, pictures
    status: Literal["ok", "warn", "fail"]
    detail: str = Field(default="", max_length=300)
    fix: str = Field(default="", max_length=300)  # what to do about a warn or a fail ("" when ok)


class DoctorReply(Record):
    ok: bool  # no health line failed and every picture pair passed
    checks: tuple[DoctorCheck, ...] = ()
    health: tuple[HealthCheck, ...] = ()
