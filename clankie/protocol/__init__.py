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

from clankie.protocol.base import Empty, Hello, Record
from clankie.protocol.codes import Code
from clankie.protocol.envelope import (
    MAX_MSGID,
    NOTIFICATION,
    PROTOCOL_VERSION,
    REQUEST,
    RESPONSE,
    BadEnvelope,
    Envelope,
    Notification,
    Request,
    Response,
    error_map,
    notification,
    parse_envelope,
    request,
    response,
)
from clankie.protocol.methods import CALLERS, METHODS, Method, validate
from clankie.protocol.records_bridge import (
    Author,
    HistoryMessage,
    HistoryReply,
    HistoryRequest,
    ImageAttachment,
    Outcome,
    Room,
    TextUpdate,
    TextUpdateReply,
    ToolActivity,
    Trigger,
    TurnAbsorbed,
    TurnFailed,
    TurnKind,
    TurnResult,
    TurnSettled,
    TurnSilent,
    TurnSubmit,
    TypingSignal,
)
from clankie.protocol.records_child import (
    AbortReply,
    AbortRun,
    Heartbeat,
    LaneInfo,
    LanesReply,
    RunReport,
    SayRequest,
    Stopping,
    Tokens,
)
from clankie.protocol.records_control import (
    ChildStatus,
    ChildTarget,
    ControlReply,
    DoctorCheck,
    DoctorReply,
    ExitInfo,
    LogsReply,
    LogsRequest,
    ResolveReply,
    ResolveRequest,
    StatusReply,
    SupervisorInfo,
)
from clankie.protocol.records_hosts import (
    Artifact,
    DiagramRequest,
    ScreenshotRequest,
    Viewport,
)

__all__ = [
    "CALLERS",
    "MAX_MSGID",
    "METHODS",
    "NOTIFICATION",
    "PROTOCOL_VERSION",
    "REQUEST",
    "RESPONSE",
    "AbortReply",
    "AbortRun",
    "Artifact",
    "Author",
    "BadEnvelope",
    "ChildStatus",
    "ChildTarget",
    "Code",
    "ControlReply",
    "DiagramRequest",
    "DoctorCheck",
    "DoctorReply",
    "Empty",
    "Envelope",
    "ExitInfo",
    "Heartbeat",
    "Hello",
    "HistoryMessage",
    "HistoryReply",
    "HistoryRequest",
    "ImageAttachment",
    "LaneInfo",
    "LanesReply",
    "LogsReply",
    "LogsRequest",
    "Method",
    "Notification",
    "Outcome",
    "Record",
    "Request",
    "ResolveReply",
    "ResolveRequest",
    "Response",
    "Room",
    "RunReport",
    "SayRequest",
    "ScreenshotRequest",
    "StatusReply",
    "Stopping",
    "SupervisorInfo",
    "TextUpdate",
    "TextUpdateReply",
    "Tokens",
    "ToolActivity",
    "Trigger",
    "TurnAbsorbed",
    "TurnFailed",
    "TurnKind",
    "TurnResult",
    "TurnSettled",
    "TurnSilent",
    "TurnSubmit",
    "TypingSignal",
    "Viewport",
    "error_map",
    "notification",
    "parse_envelope",
    "request",
    "response",
    "validate",
]
