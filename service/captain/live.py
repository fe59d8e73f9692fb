"""A lane's live records and the small pure helpers the captain shell uses on them.

Kept apart from :mod:`service.captain.captain` so the shell reads as the
sequence of what happens to a turn, and these as the data it happens to.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from clankie import ipc
from clankie.clock import Clock
from clankie.errors import ChannelBroken, ChannelClosed
from clankie.protocol import Code, HistoryMessage, Room, ToolActivity, Trigger, TurnResult, TypingSignal
from clankie.redact import NOTHING, Redactor
from service.agent.agent import Agent
from service.agent.content import UserMessage
from service.agent.events import ToolEnd, ToolStart
from service.agent.outcome import OutcomeKind, RunOutcome
from service.captain import prompt
from service.captain.inbound import NO_TURN_IMAGES, TurnImages
from service.captain.lane import Action, Lane, joining
from service.captain.records import LaneLog
from service.captain.spending import LaneMeter
from service.captain.tools import DeliveryContext, TurnCapture

HOST_NAME = re.compile(r"[A-Za-z0-9.-]{1,253}")
SESSION_FAILED = Code.CAPTAIN_SESSION_FAILED
# internal only: the run was cut by a graceful shutdown; the turn service answers ``shutting_down``
# and leaves the delivery unsettled so the restarted service runs it again
SHUTDOWN_CODE = Code.SHUTTING_DOWN
UNCONFIGURED = Code.CAPTAIN_PROVIDER_UNCONFIGURED
FAILURE_CODES = {
    OutcomeKind.USAGE_LIMIT: Code.CAPTAIN_USAGE_LIMIT_REACHED,
    OutcomeKind.MODEL_FAILED: Code.CAPTAIN_MODEL_FAILED,
    OutcomeKind.RESPONSE_MISSING: Code.CAPTAIN_RESPONSE_MISSING,
    OutcomeKind.ABORTED: SESSION_FAILED,
    OutcomeKind.BUDGET_EXHAUSTED: Code.CAPTAIN_BUDGET_EXHAUSTED,
    OutcomeKind.RUN_BUDGET_EXCEEDED: Code.CAPTAIN_RUN_BUDGET_EXCEEDED,
}

@dataclass(frozen=True, slots=True)
class LanePlan:
    kind: str  # "room" | "system" | "oneshot"
    key: str
    directory: Path
    privileged: bool

    @property
    def contained(self) -> bool:
        """A privileged one-shot (a system actor outside a trusted room): the shell, so it reads nothing
        untrusted: no room history, no catch-up backlog, no browser; only the actor's own trigger."""
        return self.privileged and self.kind == "oneshot"


@dataclass
class TurnSlot:
    turn_id: str
    delivery: DeliveryContext
    trigger: Trigger
    backlog: tuple[HistoryMessage, ...]
    future: asyncio.Future[TurnResult]
    images: TurnImages = NO_TURN_IMAGES


@dataclass
class LiveLane:
    """One lane's live objects: the machine, the agent, and the turns waiting on it."""

    key: str
    plan: LanePlan
    room: Room
    machine: Lane
    agent: Agent
    capture: TurnCapture
    lane_log: LaneLog
    fresh: bool = True  # cold until its first run starts
    slots: dict[str, TurnSlot] = field(default_factory=dict)
    owner_task: asyncio.Task[None] | None = None
    run_id: str = ""  # the lane's latest run (kept after a drop, for the zombie report)
    run_started_boot: float = 0.0
    last_event_boot: float = 0.0
    paced: bool = False  # its model call is waiting in the provider governor: silent, not stalled
    typing_sent: bool = False
    text_so_far: str = ""
    last_outcome: RunOutcome | None = None
    unsubscribe: Callable[[], None] | None = None
    history_requests: int = 0
    meter: LaneMeter | None = None  # its budgets, cache lifetimes and health (service.captain.spending)


def joined_by(lane: LiveLane, action: Action) -> tuple[str, tuple[str, ...]] | None:
    """The lane's run id and the delivery ids ``action`` makes part of that run, or None if it adds none."""
    turns = joining(action)
    if not turns or lane.machine.run_id is None:
        return None
    return lane.machine.run_id, tuple(lane.slots[t].delivery.delivery_id for t in turns)


async def ended_within(clock: Clock, task: asyncio.Task[None], seconds: float) -> bool:
    """Wait (on ``clock``) up to ``seconds`` for ``task``; True if it is done."""
    if not task.done():
        timer = asyncio.ensure_future(clock.sleep(seconds))
        try:
            await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
    return task.done()


def failure_code(outcome: RunOutcome) -> str | None:
    """The code every attached turn fails with, or None for an answer."""
    if outcome.kind is OutcomeKind.OK:
        return None
    if outcome.kind is OutcomeKind.RUN_BUDGET_EXCEEDED and outcome.text.strip():
        return None  # stopped at a run cap: the room gets the words written so far
    if outcome.kind is OutcomeKind.ABORTED and outcome.abort_reason == "shutdown":
        return SHUTDOWN_CODE
    return FAILURE_CODES[outcome.kind]


def lane_message(slot: TurnSlot, context: tuple[HistoryMessage, ...] | None, boundary: str) -> UserMessage:
    """One turn's user message: the framed prompt, the trigger's fetched pictures, then the backlog's.

    A backlog message's pictures are sent only when its line is in ``context`` (so each image has a line
    that names it); a cold lane's history carries the backlog messages too, since they precede the trigger.
    """
    backlog = slot.images.shown_for(frozenset(m.id for m in context or ()))
    reports = tuple((mid, imgs.report()) for mid, imgs in backlog)
    text = prompt.turn_prompt(slot.trigger, context, slot.images.trigger.report(), reports, boundary=boundary)
    paths = slot.images.trigger.paths + tuple(p for _, imgs in backlog for p in imgs.paths)
    return UserMessage(text=text, images=paths)


def tool_activity(delivery_id: str, event: ToolStart | ToolEnd, redact: Redactor = NOTHING) -> ToolActivity:
    """The content-free ``tool`` notification for one tool event of the run owner's delivery (a host that
    holds a secret this process knows is not named)."""
    host = event.subject if isinstance(event, ToolStart) else None
    if host is not None and (not HOST_NAME.fullmatch(host) or redact.found(host)):
        host = None
    return ToolActivity(delivery_id=delivery_id, call_id=event.call_id[:128] or "call", tool=event.name[:64],
                        host=host, active=isinstance(event, ToolStart))


async def send_tool(conn: ipc.Connection, record: ToolActivity) -> None:
    with contextlib.suppress(ChannelBroken, ChannelClosed, ValueError):
        await conn.notify("tool", record)


async def send_typing(conn: ipc.Connection, delivery_id: str) -> None:
    with contextlib.suppress(ChannelBroken, ChannelClosed):
        await conn.notify("typing", TypingSignal(delivery_id=delivery_id))
