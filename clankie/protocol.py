"""The wire contract: message envelopes and the typed records they carry.

Envelopes follow msgpack-RPC:

* request      ``[0, msgid, method, params]``
* response     ``[1, msgid, error, result]`` where ``error`` is ``None`` or
  ``{"code": str, "message": str}``
* notification ``[2, method, params]``

Every connection opens with a ``hello`` request in each direction's first
frame. Records are frozen pydantic models that forbid unknown keys; they are
validated once, at the receive boundary, and never travel past it as dicts.
Which records a method takes and returns is declared in :data:`METHODS`,
grouped by link so a peer cannot call a method that is not meant for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from clankie.errors import RemoteProtocolError

PROTOCOL_VERSION = 1

REQUEST, RESPONSE, NOTIFICATION = 0, 1, 2


class Record(BaseModel):
    """Base of every wire record: frozen, no unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_wire(self) -> dict[str, Any]:
        """The record as plain msgpack-able data (what ``model_dump`` gives, minus its overhead)."""
        wire: dict[str, Any] = self.__pydantic_serializer__.to_python(self)
        return wire


class Empty(Record):
    """A request or reply with nothing to say."""


class Hello(Record):
    """First message on every connection. A supervised child also says which
    attachment root it derived, so the supervisor can prove writers and readers agree."""

    role: str = Field(min_length=1, max_length=32)
    pid: int = Field(ge=0)
    protocol: int
    attachment_root: str | None = Field(default=None, max_length=4096)


# --------------------------------------------------------------- bridge <-> service


class Room(Record):
    """A Discord text room: a guild channel, or a DM channel (``guild_id`` None)."""

    guild_id: str | None = Field(default=None, max_length=32)
    channel_id: str = Field(min_length=1, max_length=32)
    name: str = Field(default="", max_length=200)
    trusted: bool = False


class Author(Record):
    id: str = Field(min_length=1, max_length=32)
    name: str = Field(default="", max_length=200)
    is_bot: bool = False
    is_system_actor: bool = False


class ImageAttachment(Record):
    """An image a person attached; the service may fetch or skip it."""

    url: str = Field(max_length=2048)
    filename: str = Field(default="", max_length=256)
    content_type: str = Field(default="", max_length=100)
    size: int = Field(default=0, ge=0)


class Trigger(Record):
    message_id: str = Field(min_length=1, max_length=32)
    author: Author
    text: str = Field(max_length=8000)
    attachments: tuple[ImageAttachment, ...] = Field(default=(), max_length=10)
    unprompted: bool = False
    at: float = 0.0


class TurnSubmit(Record):
    """``turn.submit``: one admitted message becomes one turn (idempotent by delivery id)."""

    delivery_id: str = Field(min_length=1, max_length=128)
    room: Room
    trigger: Trigger
    # A catch-up turn answers a drifted room's buffered messages at once: the
    # trigger is the newest, these are the ones before it (oldest first).
    backlog: tuple[HistoryMessage, ...] = Field(default=(), max_length=50)


Outcome = Literal["settled", "silent", "absorbed", "failed"]


class TurnResult(Record):
    """How a turn ended. ``text``/``media`` only for ``settled``; ``code`` only for ``failed``."""

    outcome: Outcome
    turn_id: str | None = None
    text: str = ""
    media: tuple[str, ...] = ()
    code: str | None = None


class HistoryRequest(Record):
    """``history`` (service -> bridge): recent messages of a room, for a cold lane."""

    delivery_id: str = Field(max_length=128)
    room: Room
    before_message_id: str | None = None
    limit: int = Field(default=10, ge=0, le=50)


class HistoryMessage(Record):
    id: str
    author_id: str
    author_name: str = ""
    is_bot: bool = False
    is_self: bool = False
    text: str = ""
    at: float = 0.0
    # images the message carried (bridge-filtered like Trigger.attachments); the captain fetches only a backlog's
    attachments: tuple[ImageAttachment, ...] = Field(default=(), max_length=10)


class HistoryReply(Record):
    messages: tuple[HistoryMessage, ...] = ()


class TypingSignal(Record):
    """``typing`` (service -> bridge): content-free; light the delivery being held."""

    delivery_id: str = Field(max_length=128)


class ToolActivity(Record):
    """``tool`` (service -> bridge): content-free; one of the run owner's tool calls started or ended.

    Carries the tool's name and, for tools that open an address, its host name only: never arguments,
    never model text. The bridge turns it into the tool-activity card (docs/bridge.md).
    """

    delivery_id: str = Field(max_length=128)
    call_id: str = Field(min_length=1, max_length=128)
    tool: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    host: str | None = Field(default=None, pattern=r"^[A-Za-z0-9.-]{1,253}$")
    active: bool = True  # False: this call ended


class TextUpdate(Record):
    """``text_update`` (service -> bridge): one short mid-turn message, threaded, no media."""

    delivery_id: str = Field(max_length=128)
    text: str = Field(min_length=1, max_length=600)


class TextUpdateReply(Record):
    message_id: str | None = None


# --------------------------------------------------------------- service -> hosts


class Viewport(Record):
    width: int = Field(default=1280, ge=200, le=2560)
    height: int = Field(default=800, ge=200, le=4096)


class ScreenshotRequest(Record):
    url: str = Field(min_length=1, max_length=2048)
    full_page: bool = False
    viewport: Viewport | None = None


class Artifact(Record):
    """A governed artifact written under the attachment root (ARCHITECTURE §6)."""

    ref: str
    sha256: str
    size: int
    mime: str = "image/png"
    extra_refs: tuple[str, ...] = ()


class DiagramRequest(Record):
    """``draw_er_diagram`` / ``draw_sequence_diagram``: described content, never code."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    spec: dict[str, Any]


# --------------------------------------------------------------- child <-> supervisor


class RunReport(Record):
    """A live run as the service sees it; ages are CLOCK_BOOTTIME seconds at send time."""

    lane: str
    run_id: str
    last_event_age_s: float = Field(ge=0)
    started_age_s: float = Field(default=0.0, ge=0)
    turns: int = 0


class Heartbeat(Record):
    """``heartbeat`` (child -> supervisor), with a role-specific report."""

    seq: int = 0
    detail: str = Field(default="", max_length=200)
    runs: tuple[RunReport, ...] = ()
    report: dict[str, Any] = Field(default_factory=dict)


class Stopping(Record):
    reason: str = Field(default="", max_length=200)


class AbortRun(Record):
    """``abort_run`` (supervisor -> service)."""

    lane: str
    run_id: str | None = None
    reason: Literal["stalled", "operator"] = "operator"


class AbortReply(Record):
    aborted: bool


class Tokens(Record):
    """Tokens as the provider bills them: ``input`` is the uncached remainder."""

    input: int = Field(default=0, ge=0)
    cache_read: int = Field(default=0, ge=0)
    cache_write: int = Field(default=0, ge=0)
    output: int = Field(default=0, ge=0)

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(input=self.input + other.input, cache_read=self.cache_read + other.cache_read,
                      cache_write=self.cache_write + other.cache_write, output=self.output + other.output)


class LaneInfo(Record):
    key: str
    warm: bool
    state: str
    run_id: str | None = None
    last_event_age_s: float | None = None
    turns: int = 0
    tokens: Tokens | None = None  # everything its session trees record (None: not read)


class LanesReply(Record):
    lanes: tuple[LaneInfo, ...] = ()


class SayRequest(Record):
    """``say``: an operator turn through the service without Discord."""

    room: str = Field(min_length=1, max_length=200)
    text: str = Field(min_length=1, max_length=8000)


# --------------------------------------------------------------- clankiectl -> supervisor


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


class SupervisorInfo(Record):
    pid: int
    uptime_s: float
    state: str
    ready: bool = False
    stderr_dropped: int = 0  # forwarded lines dropped because the supervisor's stderr was too slow
    disk: str = ""  # the state filesystem is full or a child's log cannot be written; "" when all is well


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


class DoctorReply(Record):
    ok: bool
    checks: tuple[DoctorCheck, ...] = ()


# --------------------------------------------------------------- method table


@dataclass(frozen=True, slots=True)
class Method:
    params: type[Record]
    result: type[Record] | None  # None: a notification


METHODS: dict[str, dict[str, Method]] = {
    # what a server with this role accepts from its clients
    "service": {
        "turn.submit": Method(TurnSubmit, TurnResult),
    },
    "bridge": {  # called by the service on the bridge's connection
        "history": Method(HistoryRequest, HistoryReply),
        "typing": Method(TypingSignal, None),
        "tool": Method(ToolActivity, None),
        "text_update": Method(TextUpdate, TextUpdateReply),
    },
    "browser": {
        "screenshot": Method(ScreenshotRequest, Artifact),
    },
    "tldraw": {
        "draw_er_diagram": Method(DiagramRequest, Artifact),
        "draw_sequence_diagram": Method(DiagramRequest, Artifact),
    },
    "supervisor": {  # child -> supervisor over the link
        "ready": Method(Empty, None),
        "heartbeat": Method(Heartbeat, None),
        "stopping": Method(Stopping, None),
        "parked": Method(Empty, None),  # a warm spare: imported, waiting for `activate`
    },
    "supervisor-control": {  # clankiectl -> supervisor over control.sock
        "status": Method(Empty, StatusReply),
        "start": Method(ChildTarget, ControlReply),
        "stop": Method(ChildTarget, ControlReply),
        "restart": Method(ChildTarget, ControlReply),
        "shutdown": Method(Empty, ControlReply),
        "logs": Method(LogsRequest, LogsReply),
        "lanes": Method(Empty, LanesReply),
        "abort": Method(AbortRun, AbortReply),
        "say": Method(SayRequest, TurnResult),
        "doctor": Method(Empty, DoctorReply),
    },
    "child": {  # supervisor -> child over the link
        "abort_run": Method(AbortRun, AbortReply),
        "shutdown": Method(Stopping, None),
        "lanes": Method(Empty, LanesReply),
        "say": Method(SayRequest, TurnResult),
        "activate": Method(Empty, None),  # a parked spare: become the child now
        "probe_artifact": Method(Empty, Artifact),  # hosts: write the probe picture
        "resolve_artifact": Method(ResolveRequest, ResolveReply),  # bridge: resolve it like a reply
    },
}


def validate(record: type[Record], params: Any) -> Record:
    """Build a record from wire params; a mismatch is the peer's fault."""
    if not isinstance(params, dict):
        raise RemoteProtocolError(f"{record.__name__} params must be a map")
    try:
        return record.model_validate(params)
    except ValidationError as exc:
        fields = ",".join(".".join(str(p) for p in e["loc"]) for e in exc.errors()[:5])
        raise RemoteProtocolError(f"invalid {record.__name__}: bad fields [{fields}]") from exc


# --------------------------------------------------------------- envelopes


@dataclass(frozen=True, slots=True)
class Request:
    msgid: int
    method: str
    params: Any


@dataclass(frozen=True, slots=True)
class Response:
    msgid: int
    error: dict[str, str] | None
    result: Any


@dataclass(frozen=True, slots=True)
class Notification:
    method: str
    params: Any


Envelope = Request | Response | Notification
MAX_MSGID = 2**32 - 1


def _msgid(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_MSGID:
        return value
    return None


class BadEnvelope(RemoteProtocolError):
    """An envelope that is not msgpack-RPC; ``msgid`` is set when one could be read."""

    def __init__(self, message: str, msgid: int | None = None) -> None:
        super().__init__(message)
        self.msgid = msgid


def parse_envelope(obj: Any) -> Envelope:
    """Check the msgpack-RPC shape of one decoded frame."""
    if not isinstance(obj, list) or not obj:
        raise BadEnvelope("message is not a msgpack-RPC array")
    kind = obj[0]
    if kind == REQUEST:
        msgid = _msgid(obj[1]) if len(obj) > 1 else None
        if len(obj) != 4 or msgid is None:
            raise BadEnvelope("request must be [0, msgid, method, params]", msgid)
        if not isinstance(obj[2], str) or not obj[2]:
            raise BadEnvelope("request method must be a non-empty string", msgid)
        return Request(msgid, obj[2], obj[3])
    if kind == RESPONSE:
        msgid = _msgid(obj[1]) if len(obj) > 1 else None
        if len(obj) != 4 or msgid is None:
            raise BadEnvelope("response must be [1, msgid, error, result]")
        err = obj[2]
        if err is not None and not (
            isinstance(err, dict)
            and isinstance(err.get("code"), str)
            and isinstance(err.get("message", ""), str)
        ):
            raise BadEnvelope("response error must be nil or {code, message}")
        return Response(msgid, err, obj[3])
    if kind == NOTIFICATION:
        if len(obj) != 3 or not isinstance(obj[1], str) or not obj[1]:
            raise BadEnvelope("notification must be [2, method, params]")
        return Notification(obj[1], obj[2])
    raise BadEnvelope("unknown message type")


def request(msgid: int, method: str, params: Any) -> list[Any]:
    return [REQUEST, msgid, method, params]


def response(msgid: int, error: dict[str, str] | None, result: Any) -> list[Any]:
    return [RESPONSE, msgid, error, result]


def notification(method: str, params: Any) -> list[Any]:
    return [NOTIFICATION, method, params]


def error_map(code: str, message: str) -> dict[str, str]:
    return {"code": code, "message": message}
