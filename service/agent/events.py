"""The agent's typed event stream: every sign of life is one of these.

Subscribers (the watchdog reporter, the typing watcher, the lane log) get
each event synchronously, in order, from :meth:`Agent.subscribe`. Events may
carry model text (``TextDelta``) but subscribers must not log it.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.agent.outcome import RunOutcome


@dataclass(frozen=True, kw_only=True)
class RunStart:
    run_id: str


@dataclass(frozen=True, kw_only=True)
class RunEnd:
    run_id: str
    outcome: RunOutcome


@dataclass(frozen=True, kw_only=True)
class TurnStart:
    """A model call is about to start (turn numbers count from 1 within a run)."""

    run_id: str
    turn: int


@dataclass(frozen=True, kw_only=True)
class TurnEnd:
    """The assistant message and its whole tool batch are done."""

    run_id: str
    turn: int
    stop_reason: str | None
    tool_calls: int


@dataclass(frozen=True, kw_only=True)
class TextDelta:
    """A fragment of the answer being streamed (discarded if a retry follows)."""

    run_id: str
    turn: int
    text: str


@dataclass(frozen=True, kw_only=True)
class StreamProgress:
    """Any other streamed sign of life: thinking, tool input, block and message markers."""

    run_id: str
    what: str


@dataclass(frozen=True, kw_only=True)
class SteerQueued:
    """A message was queued into the live run; ``pending`` is the queue length now."""

    run_id: str
    pending: int


@dataclass(frozen=True, kw_only=True)
class SteerDelivered:
    """Queued messages were delivered together, as one user turn."""

    run_id: str
    count: int


@dataclass(frozen=True, kw_only=True)
class ToolStart:
    run_id: str
    call_id: str
    name: str
    subject: str | None = None  # the tool's content-free summary of the call (a URL's host), if it offers one


@dataclass(frozen=True, kw_only=True)
class ToolUpdate:
    run_id: str
    call_id: str
    name: str


@dataclass(frozen=True, kw_only=True)
class ToolEnd:
    run_id: str
    call_id: str
    name: str
    is_error: bool


@dataclass(frozen=True, kw_only=True)
class RetryStart:
    """A transient failure; the call is retried after ``delay`` seconds."""

    run_id: str
    attempt: int
    max_attempts: int
    delay: float
    reason: str


@dataclass(frozen=True, kw_only=True)
class RetryEnd:
    run_id: str
    attempt: int
    success: bool


@dataclass(frozen=True, kw_only=True)
class ProviderWait:
    """A model call began (``waiting``) or ended waiting in the provider governor: paced, not stalled."""

    run_id: str
    waiting: bool


@dataclass(frozen=True, kw_only=True)
class CompactionStart:
    run_id: str
    reason: str  # "threshold" | "overflow"


@dataclass(frozen=True, kw_only=True)
class CompactionEnd:
    run_id: str
    reason: str
    ok: bool
    tokens_before: int


AgentEvent = (
    RunStart
    | RunEnd
    | TurnStart
    | TurnEnd
    | TextDelta
    | StreamProgress
    | SteerQueued
    | SteerDelivered
    | ToolStart
    | ToolUpdate
    | ToolEnd
    | RetryStart
    | RetryEnd
    | ProviderWait
    | CompactionStart
    | CompactionEnd
)
