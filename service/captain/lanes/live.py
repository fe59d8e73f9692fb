"""A lane's live records and the codes its turns fail with.

:class:`NewTurn` is one admitted message on its way into a lane; the lane's
shell (:mod:`service.captain.lanes.shell`) seats it in a :class:`TurnSlot` under the
turn id the lane machine gives it, and answers it through the slot's future.
Kept apart from the shell so the shell reads as the sequence of what happens
to a turn, and these as the data it happens to.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from clankie.clock import Clock
from clankie.protocol import Code, HistoryMessage, Trigger, TurnResult
from service.agent.outcome import OutcomeKind
from service.captain.media import NO_TURN_IMAGES, TurnImages
from service.captain.tools import DeliveryContext

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


@dataclass(frozen=True, slots=True, kw_only=True)
class NewTurn:
    """One admitted message on its way into a lane: what its turn needs, and where its result goes."""

    delivery: DeliveryContext
    trigger: Trigger
    backlog: tuple[HistoryMessage, ...]
    future: asyncio.Future[TurnResult]
    images: TurnImages = NO_TURN_IMAGES


@dataclass(slots=True)
class TurnSlot:
    """A turn seated in its lane under the id the lane machine gave it, until its result is set."""

    turn_id: str
    turn: NewTurn
    images: TurnImages  # the turn's pictures, less any that could not be delivered (it starts as turn.images)


async def ended_within(clock: Clock, task: asyncio.Task[None], seconds: float) -> bool:
    """Wait (on ``clock``) up to ``seconds`` for ``task``; True if it is done."""
    if not task.done():
        timer = asyncio.ensure_future(clock.sleep(seconds))
        try:
            await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
    return task.done()
