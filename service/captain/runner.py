"""The owner's run: what happens between a lane's ``StartRun`` and its ``RunEnded``.

A budget check before anything is spent, the room's backlog for a cold lane,
then the agent's run under the run id the lane machine named (the id it logs
under). The run's answer reaches the lane through the agent's ``RunEnd``
event (:meth:`service.captain.shell.LaneShell.on_event`, which reads its code
with :func:`failure_code`); a run that breaks before or outside the model
ends here, fed to the lane as ``RunEnded(code)`` through the same funnel.
Each turn's user message, the owner's and a steered one's, is
:func:`turn_message`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import TYPE_CHECKING

from clankie.errors import ChannelBroken, ChannelClosed, RemoteError, RequestTimeout
from clankie.protocol import Code, HistoryMessage, HistoryReply, HistoryRequest, TextUpdate, TextUpdateReply
from service.agent.content import UnsupportedImage, UserMessage
from service.agent.outcome import OutcomeKind, RunOutcome
from service.captain import dropped, prompt
from service.captain.lane import LIVE, LaneState, RunEnded
from service.captain.live import FAILURE_CODES, SESSION_FAILED, SHUTDOWN_CODE, TurnSlot
from service.captain.records import disk_failure
from service.captain.spending import NOTICE

if TYPE_CHECKING:
    from service.captain.shell import LaneShell

log = logging.getLogger(__name__)

HISTORY_TIMEOUT = 30.0


def new_boundary() -> str:
    """A turn's boundary around its Discord text (:func:`service.captain.prompt.boundary_lines`): 64 random bits."""
    return secrets.token_hex(8)


def turn_message(slot: TurnSlot, context: tuple[HistoryMessage, ...] | None) -> UserMessage:
    """One turn's user message: the framed prompt, the trigger's fetched pictures, then the backlog's.

    A backlog message's pictures are sent only when its line is in ``context`` (so each image has a line
    that names it); a cold lane's history carries the backlog messages too, since they precede the trigger.
    """
    backlog = slot.images.shown_for(frozenset(m.id for m in context or ()))
    reports = tuple((mid, imgs.report()) for mid, imgs in backlog)
    text = prompt.turn_prompt(slot.turn.trigger, context, slot.images.trigger.report(), reports, boundary=new_boundary())
    paths = slot.images.trigger.paths + tuple(p for _, imgs in backlog for p in imgs.paths)
    return UserMessage(text=text, images=paths)


def failure_code(outcome: RunOutcome) -> str | None:
    """The code every attached turn fails with, or None for an answer."""
    if outcome.kind is OutcomeKind.OK:
        return None
    if outcome.kind is OutcomeKind.RUN_BUDGET_EXCEEDED and outcome.text.strip():
        return None  # stopped at a run cap: the room gets the words written so far
    if outcome.kind is OutcomeKind.ABORTED and outcome.abort_reason == "shutdown":
        return SHUTDOWN_CODE
    return FAILURE_CODES[outcome.kind]


class BudgetSpent(Exception):
    """A turn's budget (tree, room or person) is spent before it starts: it fails without a model request."""


async def own(lane: LaneShell, slot: TurnSlot, run_id: str) -> None:
    """Run ``slot``'s turn as the owner of ``run_id``; a run that breaks outside the model fails its turns."""
    kit = lane.kit
    code: str | None = None
    try:
        if kit.spending is not None and kit.spending.spent_key(lane.room, slot.turn.trigger.author.id) is not None:
            raise BudgetSpent  # no history call, no model request
        if lane.meter is not None:
            lane.meter.begin_run()
        history: tuple[HistoryMessage, ...] | None = None
        if lane.fresh and not lane.plan.contained:
            history = await _history(lane, slot)
            lane.fresh = history is None  # no bridge or a failed call: the next run reads cold again
        # a catch-up turn's buffered messages were never heard by the lane: warm or cold, they ride along;
        # a privileged one-shot outside a trusted room reads only its actor's own trigger (LanePlan.contained)
        context = None if lane.plan.contained else history or slot.turn.backlog or None
        lane.capture.media.clear()
        lane.typing_sent, lane.text_so_far = False, ""
        try:
            await lane.agent.run(turn_message(slot, context), run_id=run_id)
        except (OSError, UnsupportedImage):
            if not slot.images.has_files:
                raise
            log.warning("lane %s: stored images of run %s unreadable; running the text", lane.key, run_id)
            slot.images = slot.images.without_files()
            await lane.agent.run(turn_message(slot, context), run_id=run_id)
    except BudgetSpent:
        code = Code.CAPTAIN_BUDGET_EXHAUSTED
        log.warning("lane %s: turn %s not run: today's budget is spent", lane.key, slot.turn_id)
        await _budget_notice(lane, slot)
    except asyncio.CancelledError:
        code = SHUTDOWN_CODE if kit.shutting_down() else SESSION_FAILED
    except OSError as exc:  # the disk refused the session: one line with its code, the run's turns fail with it
        code = disk_failure(exc)
        if code is None:
            log.exception("lane %s: run %s failed outside the model", lane.key, run_id)
            code = SESSION_FAILED
        else:
            log.error("lane %s: run %s of delivery %s ended: its session line was refused (%s: %s)",
                      lane.key, run_id, slot.turn.delivery.delivery_id, code, exc.strerror)
    except Exception:
        log.exception("lane %s: run %s failed outside the model", lane.key, run_id)
        code = SESSION_FAILED
    if code is not None and lane.machine.state in LIVE and lane.run_id == run_id:
        lane.feed(RunEnded(code))
    if lane.meter is not None:
        lane.meter.end_run()
    if lane.plan.kind == "oneshot" and lane.machine.state is LaneState.IDLE:
        kit.drop(lane)


async def _budget_notice(lane: LaneShell, slot: TurnSlot) -> None:
    """An addressed turn refused by a spent budget: one templated line, at most once per room an hour."""
    owner, spending = slot.turn.delivery, lane.kit.spending
    if slot.turn.trigger.unprompted or slot.turn.backlog or owner.conn is None or owner.conn.closed:
        return
    assert spending is not None
    if not spending.notice_due(lane.room):
        return
    try:
        await owner.conn.request("text_update", TextUpdate(delivery_id=owner.delivery_id, text=NOTICE),
                                 expect=TextUpdateReply, timeout=HISTORY_TIMEOUT)
    except (RemoteError, ChannelBroken, ChannelClosed, RequestTimeout) as exc:
        log.warning("lane %s: the budget notice was not posted (%s)", lane.key, type(exc).__name__)


async def _history(lane: LaneShell, slot: TurnSlot) -> tuple[HistoryMessage, ...] | None:
    """The room's backlog; None when it could not be read (no bridge connection, or the call failed)."""
    conn, limit = slot.turn.delivery.conn, lane.kit.settings.discord_context_messages
    if limit == 0:
        return ()
    if conn is None or conn.closed:
        return None
    lane.history_requests += 1
    request = HistoryRequest(
        delivery_id=slot.turn.delivery.delivery_id, room=lane.room, before_message_id=slot.turn.trigger.message_id, limit=limit
    )
    try:
        reply = await conn.request("history", request, expect=HistoryReply, timeout=HISTORY_TIMEOUT)
    except (RemoteError, ChannelBroken, ChannelClosed, RequestTimeout) as exc:
        log.warning("lane %s: no history for a cold lane (%s)", lane.key, type(exc).__name__)
        return None
    # a message judged poison never comes back through the room's history (service.captain.dropped)
    return dropped.without(reply.messages, dropped.dropped_ids(lane.kit.paths, lane.room))[-limit:]
