"""The method table: which records each method takes and returns, grouped by the role that serves it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError

from clankie.errors import RemoteProtocolError
from clankie.protocol.base import Empty, Record
from clankie.protocol.records_bridge import (
    HistoryReply,
    HistoryRequest,
    TextUpdate,
    TextUpdateReply,
    ToolActivity,
    TurnResult,
    TurnSubmit,
    TypingSignal,
)
from clankie.protocol.records_child import (
    AbortReply,
    AbortRun,
    BudgetReply,
    BudgetRequest,
    Heartbeat,
    LanesReply,
    LanesRequest,
    SayRequest,
    Stopping,
)
from clankie.protocol.records_control import (
    ChildTarget,
    ControlReply,
    DoctorReply,
    LogsReply,
    LogsRequest,
    ResolveReply,
    ResolveRequest,
    StatusReply,
)
from clankie.protocol.records_hosts import Artifact, DiagramRequest, ScreenshotRequest
from clankie.protocol.records_peers import Peers

R = TypeVar("R", bound=Record)


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
        "lanes": Method(LanesRequest, LanesReply),
        "abort": Method(AbortRun, AbortReply),
        "say": Method(SayRequest, TurnResult),
        "doctor": Method(Empty, DoctorReply),
        "budget": Method(BudgetRequest, BudgetReply),
    },
    "child": {  # supervisor -> child over the link
        "abort_run": Method(AbortRun, AbortReply),
        "shutdown": Method(Stopping, None),
        "lanes": Method(LanesRequest, LanesReply),
        "say": Method(SayRequest, TurnResult),
        "budget": Method(BudgetRequest, BudgetReply),
        "activate": Method(Empty, None),  # a parked spare: become the child now
        "peers": Method(Peers, None),  # the pids that may dial the socket this child serves (clankie.peers)
        "probe_artifact": Method(Empty, Artifact),  # hosts: write the probe picture
        "resolve_artifact": Method(ResolveRequest, ResolveReply),  # bridge: resolve it like a reply
    },
}

# who calls the methods a role serves (the direction of each group, for docs/protocol.md)
CALLERS: dict[str, str] = {
    "service": "bridge → service",
    "bridge": "service → bridge (on the bridge's own connection)",
    "browser": "service → browser host",
    "tldraw": "service → tldraw host",
    "supervisor": "child → supervisor (link)",
    "supervisor-control": "clankiectl → supervisor (control.sock)",
    "child": "supervisor → child (link)",
}


def validate(record: type[R], params: Any) -> R:
    """Build a record from wire params; a mismatch is the peer's fault."""
    if not isinstance(params, dict):
        raise RemoteProtocolError(f"{record.__name__} params must be a map")
    try:
        return record.model_validate(params)
    except ValidationError as exc:
        fields = ",".join(".".join(str(p) for p in e["loc"]) for e in exc.errors()[:5])
        raise RemoteProtocolError(f"invalid {record.__name__}: bad fields [{fields}]") from exc
