"""The owner's run: what happens between a lane's ``StartRun`` and its ``RunEnded``.

A budget check before anything is spent, the room's backlog for a cold lane,
then the agent's run under the run id the lane machine named (the id it logs
under). The run's answer reaches the lane through the agent's ``RunEnd``
event (:meth:`service.captain.lanes.shell.LaneShell.on_event`, which reads its code
with :func:`failure_code`); a run that breaks before or outside the model
ends here: :func:`own` returns its code, and the shell's owner task feeds it
to the lane as ``RunEnded(code, run_id)`` through the same funnel. The runner
never sees the shell: :class:`Owner` names what it needs.
Each turn's user message, the owner's and a steered one's, is
:func:`turn_message`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from clankie import ipc
from clankie.errors import ChannelBroken, ChannelClosed, RemoteError, RequestTimeout
from clankie.protocol import Code, HistoryMessage, HistoryReply, HistoryRequest, Room, TextUpdate, TextUpdateReply
from clankie.store.ports import StaleEpoch
from service.agent.agent import Agent
from service.agent.content import UnsupportedImage, UserMessage
from service.agent.outcome import OutcomeKind, RunOutcome
from service.captain.lanes import dropped, prompt
from service.captain.lanes.keys import CaptainPaths
from service.captain.lanes.live import FAILURE_CODES, SESSION_FAILED, SHUTDOWN_CODE, TurnSlot
from service.captain.media import InboundImages
from service.captain.records import disk_failure
from service.captain.spend import NOTICE, LaneMeter, Spending

log = logging.getLogger(__name__)

HISTORY_TIMEOUT = 30.0


def new_boundary() -> str:
    """A turn's boundary around its Discord text (:func:`service.captain.lanes.prompt.boundary_lines`): 64 random bits."""
    return secrets.token_hex(8)


def turn_message(slot: TurnSlot, context: tuple[HistoryMessage, ...] | None) -> UserMessage:
    """One turn's user message: the framed prompt, the trigger's fetched pictures, then the backlog's.

    A backlog message's pictures are sent only when its line is in ``context`` (so each image has a line
    that names it); a cold lane's history carries the backlog messages too, since they precede the trigger.
    """
    backlog = slot.images.shown_for(frozenset(m.id for m in context or ()))
    reports = tuple((mid, image_report(imgs)) for mid, imgs in backlog)
    text = prompt.turn_prompt(slot.turn.trigger, context, image_report(slot.images.trigger), reports, boundary=new_boundary())
    paths = slot.images.trigger.paths + tuple(p for _, imgs in backlog for p in imgs.paths)
    return UserMessage(text=text, images=paths)


def image_report(images: InboundImages) -> prompt.ImageReport:
    """What the prompt says of a message's pictures: how many ride with the turn, why the others do not."""
    return prompt.ImageReport(shown=len(images.paths), missing=images.missing())


def failure_code(outcome: RunOutcome) -> str | None:
    """The code every attached turn fails with, or None for an answer."""
    if outcome.kind is OutcomeKind.OK:
        return None
    if outcome.kind is OutcomeKind.RUN_BUDGET_EXCEEDED and outcome.text.strip():
        return None  # stopped at a run cap: the room gets the words written so far
    if outcome.kind is OutcomeKind.ABORTED and outcome.abort_reason == "shutdown":
        return SHUTDOWN_CODE
    if outcome.kind is OutcomeKind.ABORTED and outcome.abort_reason == "moved":
        return Code.CAPTAIN_SHARD_MOVED  # the room's shard was lost mid-run: another tree answers it
    return FAILURE_CODES[outcome.kind]


class BudgetSpent(Exception):
    """A turn's budget (tree, room or person) is spent before it starts: it fails without a model request."""


class Backlog:
    """A lane's reading of its room's backlog: cold until a read succeeds, and how many reads it asked for.

    The lane's shell holds it (its ``fresh`` and ``history_requests`` are this), the registry sets it warm when a
    lane evicted warm comes back, and the owner's run reads through it while the lane is cold.
    """

    def __init__(self, key: str, room: Room, limit: int, paths: CaptainPaths) -> None:
        self.key, self.room, self.limit, self.paths = key, room, limit, paths
        self.cold = True
        self.requests = 0

    async def read(self, slot: TurnSlot) -> tuple[HistoryMessage, ...] | None:
        """The room's backlog before ``slot``'s trigger; None when it could not be read (no bridge connection, or
        the call failed), and the lane stays cold, so its next run reads it again."""
        conn = slot.turn.delivery.conn
        backlog: tuple[HistoryMessage, ...] | None
        if self.limit == 0:
            backlog = ()
        elif conn is None or conn.closed:
            backlog = None
        else:
            self.requests += 1
            backlog = await history(self.key, self.room, conn, slot, self.limit, self.paths)
        self.cold = backlog is None
        return backlog


@dataclass(frozen=True, kw_only=True)
class Owner:
    """What the owner's run needs of its lane, named: the lane's shell builds it, and the runner sees nothing else."""

    key: str
    room: Room
    agent: Agent
    meter: LaneMeter | None
    spending: Spending | None
    backlog: Backlog | None  # None: the lane is warm, or contained (a privileged one-shot reads no room)
    contained: bool  # a privileged one-shot outside a trusted room reads only its actor's own trigger
    shutting_down: Callable[[], bool]


async def own(owner: Owner, slot: TurnSlot, run_id: str) -> str | None:
    """Run ``slot``'s turn as the owner of ``run_id``; the code its turns fail with when the run broke outside
    the model (None: the run's end reached the lane through the agent's ``RunEnd``)."""
    code: str | None = None
    key = owner.key
    try:
        if owner.spending is not None and owner.spending.spent_key(owner.room, slot.turn.trigger.author.id) is not None:
            raise BudgetSpent  # no history call, no model request
        if owner.meter is not None:
            owner.meter.begin_run()
        history = await owner.backlog.read(slot) if owner.backlog is not None else None
        # a catch-up turn's buffered messages were never heard by the lane: warm or cold, they ride along;
        # a privileged one-shot outside a trusted room reads only its actor's own trigger (LanePlan.contained)
        context = None if owner.contained else history or slot.turn.backlog or None
        try:
            await owner.agent.run(turn_message(slot, context), run_id=run_id)
        except (OSError, UnsupportedImage):
            if not slot.images.has_files:
                raise
            log.warning("lane %s: stored images of run %s unreadable; running the text", key, run_id)
            slot.images = slot.images.without_files()
            await owner.agent.run(turn_message(slot, context), run_id=run_id)
    except BudgetSpent:
        code = Code.CAPTAIN_BUDGET_EXHAUSTED
        log.warning("lane %s: turn %s not run: today's budget is spent", key, slot.turn_id)
        assert owner.spending is not None
        try:
            await _budget_notice(key, owner.room, owner.spending, slot)
        except asyncio.CancelledError:  # cut by shutdown or an abort: the turn's outcome is decided, only the line is lost
            log.info("lane %s: the budget notice of turn %s was cut short", key, slot.turn_id)
    except asyncio.CancelledError:
        code = SHUTDOWN_CODE if owner.shutting_down() else SESSION_FAILED
    except OSError as exc:  # the disk refused the session: one line with its code, the run's turns fail with it
        code = disk_failure(exc)
        if code is None:
            log.exception("lane %s: run %s failed outside the model", key, run_id)
            code = SESSION_FAILED
        else:
            log.error("lane %s: run %s of delivery %s ended: its session line was refused (%s: %s)",
                      key, run_id, slot.turn.delivery.delivery_id, code, exc.strerror)
    except StaleEpoch:  # the PostgreSQL profile: another tree holds the room's shard now; nothing was written
        log.warning("lane %s: run %s ended: this tree no longer holds the room's shard (its write was refused)", key, run_id)
        code = Code.CAPTAIN_SHARD_MOVED
    except Exception:
        log.exception("lane %s: run %s failed outside the model", key, run_id)
        code = SESSION_FAILED
    if owner.meter is not None:
        owner.meter.end_run()
    return code


async def _budget_notice(key: str, room: Room, spending: Spending, slot: TurnSlot) -> None:
    """An addressed turn refused by a spent budget: one templated line, at most once per room an hour."""
    owner = slot.turn.delivery
    if slot.turn.trigger.unprompted or slot.turn.backlog or owner.conn is None or owner.conn.closed:
        return
    if not spending.notice_due(room):
        return
    try:
        await owner.conn.request("text_update", TextUpdate(delivery_id=owner.delivery_id, text=NOTICE),
                                 expect=TextUpdateReply, timeout=HISTORY_TIMEOUT)
    except (RemoteError, ChannelBroken, ChannelClosed, RequestTimeout) as exc:
        log.warning("lane %s: the budget notice was not posted (%s)", key, type(exc).__name__)


async def history(key: str, room: Room, conn: ipc.Connection, slot: TurnSlot, limit: int, paths: CaptainPaths
                  ) -> tuple[HistoryMessage, ...] | None:
    """The room's ``limit`` messages before ``slot``'s trigger, asked of the bridge on ``conn``; None when the
    call failed. A message judged poison never comes back through it (:mod:`service.captain.lanes.dropped`)."""
    request = HistoryRequest(
        delivery_id=slot.turn.delivery.delivery_id, room=room, before_message_id=slot.turn.trigger.message_id, limit=limit
    )
    try:
        reply = await conn.request("history", request, expect=HistoryReply, timeout=HISTORY_TIMEOUT)
    except (RemoteError, ChannelBroken, ChannelClosed, RequestTimeout) as exc:
        log.warning("lane %s: no history for a cold lane (%s)", key, type(exc).__name__)
        return None
    return dropped.without(reply.messages, dropped.dropped_ids(paths, room))[-limit:]
