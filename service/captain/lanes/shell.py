"""The lane's shell: one per live lane, the only caller of its machine and the one place its actions are obeyed.

:meth:`LaneShell.feed` is the lane's funnel (h11's ``_process_event``): a
turn arriving (:mod:`service.captain.lanes.captain`), the run streaming or ending
(the agent's events, the owner's run in :mod:`service.captain.lanes.runner`) and an
abort all go in through it, and the actions that come back are carried out
in one exhaustive ``match``, so an action the shell does not carry out is a
mypy error (:func:`typing.assert_never`). A new lane event costs one row of
:data:`service.captain.lanes.lane.TRANSITIONS` and, if it brings a new action, one
``case`` here.

Each id lives in one place: the machine holds the run id and the turn ids
(owner, steerers, held); the shell holds each waiting turn's
:class:`~service.captain.lanes.live.TurnSlot` under its turn id; the delivery the
live run answers (:attr:`LaneShell.owner`) is read from the two, never copied
(the tools read it through :class:`~service.captain.tools.model_tools.TurnCapture`).

Before a delivery is handed to a run (as its owner, or steered into it),
``joins`` is told which run it joins, so a crash during that run is counted
against it and against nobody who was merely waiting
(:mod:`service.captain.deliveries.store`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, assert_never, overload

from clankie import ipc
from clankie.clock import Clock
from clankie.errors import ChannelBroken, ChannelClosed
from clankie.metrics import METER, TURN_FIRST_WORDS
from clankie.protocol import Room, ToolActivity, TurnResult, TypingSignal
from clankie.redact import NOTHING, Redactor
from clankie.settings import Settings
from clankie.tasks import TaskSet, TaskSetFull
from service.agent.agent import Agent, AgentConfig
from service.agent.content import UnsupportedImage
from service.agent.events import AgentEvent, ProviderWait, RetryStart, RunEnd, RunStart, TextDelta, ToolEnd, ToolStart, TurnStart
from service.agent.governor import Governor
from service.agent.model import Provider
from service.agent.outcome import OutcomeKind, RunOutcome
from service.agent.routes import Routes
from service.agent.session import SessionTree
from service.agent.tools import Tool
from service.captain.lanes import prompt, runner
from service.captain.lanes.keys import CaptainPaths, LanePlan
from service.captain.lanes.lane import (
    AbortAgent,
    AbortRequested,
    Action,
    DropLane,
    Event,
    Fail,
    Finish,
    FlushSteers,
    HoldSteer,
    IllegalLaneEvent,
    Lane,
    RunEnded,
    RunStreaming,
    ShutDown,
    StartRun,
    Steer,
    TurnArrived,
    joining,
)
from service.captain.lanes.lane_log import LaneLog
from service.captain.lanes.live import FAILURE_CODES, NewTurn, TurnSlot
from service.captain.media import OVER_STEER_LIMIT
from service.captain.records import disk_failure
from service.captain.spend import Spending
from service.captain.tools import DeliveryContext, TurnCapture

log = logging.getLogger(__name__)

HOST_NAME = re.compile(r"[A-Za-z0-9.-]{1,253}")  # a tool card names a host only if it looks like one


@dataclass(frozen=True, kw_only=True)
class LaneKit:
    """What every lane's shell shares: the service's settings, clock and provider, and the captain's jobs."""

    settings: Settings
    clock: Clock
    provider: Provider | None
    paths: CaptainPaths
    tools: Callable[[TurnCapture, LanePlan], list[Tool]]
    drop: Callable[[LaneShell], None]  # forget the lane: its next message rebuilds it (the registry's drop)
    joins: Callable[[str, tuple[str, ...]], None] | None  # (run id, delivery ids) before they join that run
    shutting_down: Callable[[], bool]
    background: TaskSet  # fire-and-forget sends (typing, tool cards), held until done
    redact: Redactor  # the Anthropic key never leaves in a reply or a tool card
    config: AgentConfig  # window, compaction budget, session retention
    governor: Governor | None = None  # the service's one provider governor (None: a private one per agent)
    spending: Spending | None = None  # budgets, cache lifetimes and health (None: no budgets, 5-minute caching)
    routes: Routes | None = None  # the model's routes (None: the provider alone, through governor)


class LaneShell:
    """One live lane: its machine, its agent, the turns waiting on it, and what is reported about its run."""

    def __init__(self, kit: LaneKit, plan: LanePlan, key: str, room: Room, session: SessionTree) -> None:
        assert kit.provider is not None  # the captain opens no lane without a provider
        self.kit, self.plan, self.key, self.room = kit, plan, key, room
        self.machine = Lane(key, oneshot=plan.kind == "oneshot")
        self.slots: dict[str, TurnSlot] = {}  # every turn waiting on the lane, by the turn id the machine gave it
        self.capture = TurnCapture(room=room, owner_of=lambda: self.owner)
        self.meter = kit.spending.meter(key, room, lambda: self.capture.actor_id or None) if kit.spending else None
        self.agent = Agent(
            session=session,
            provider=kit.provider,
            tools=kit.tools(self.capture, plan),
            clock=kit.clock,
            system_prompt=prompt.system_prompt(kit.settings.character_id, plan.privileged),
            config=kit.config,
            governor=kit.governor,
            meter=self.meter,
            routes=kit.routes,
        )
        self.lane_log = LaneLog(kit.paths.lane_log(room), room, kit.clock)
        self.backlog = runner.Backlog(key, room, kit.settings.discord_context_messages, kit.paths)
        self.owner_task: asyncio.Task[None] | None = None
        self.run_started_boot = 0.0
        self.last_event_boot = 0.0
        self.paced = False  # its model call is waiting in the provider governor: silent, not stalled
        self.typing_sent = False
        self.text_so_far = ""
        self.last_outcome: RunOutcome | None = None
        self._unsubscribe = self.agent.subscribe(self.on_event)

    @property
    def run_id(self) -> str | None:
        """The live run's id (a dropped lane's aborted run keeps it: it may still be writing)."""
        return self.machine.run_id

    @property
    def fresh(self) -> bool:
        """Cold: no run has read the room's backlog yet (the next run reads it)."""
        return self.backlog.cold

    @fresh.setter
    def fresh(self, cold: bool) -> None:
        self.backlog.cold = cold

    @property
    def history_requests(self) -> int:
        """How many times this lane asked the bridge for its room's backlog."""
        return self.backlog.requests

    @property
    def owner(self) -> DeliveryContext | None:
        """The delivery the live run answers: its owner turn's, while that waits (None between runs)."""
        slot = self.slots.get(self.machine.owner) if self.machine.owner is not None else None
        return slot.turn.delivery if slot is not None else None

    def evictable(self) -> bool:
        """The machine is at rest, no turn waits on the lane and its owner task (if any) has ended: safe to evict."""
        task = self.owner_task
        return self.machine.at_rest and not self.slots and (task is None or task.done())

    def close(self) -> None:
        """Stop hearing the agent and close the lane's session file."""
        self._unsubscribe()
        self.agent.session.close()

    # ------------------------------------------------------------------ the funnel

    @overload
    def feed(self, event: TurnArrived, turn: NewTurn) -> list[Action]: ...
    @overload
    def feed(self, event: RunStreaming | RunEnded | AbortRequested | ShutDown) -> list[Action]: ...

    def feed(self, event: Event, turn: NewTurn | None = None) -> list[Action]:
        """Hand ``event`` to the lane machine, carry out the actions it answers, in order, and return them.

        ``turn`` rides beside a :class:`~service.captain.lanes.lane.TurnArrived`, and only there: the record of
        the arriving turn, seated under the turn id the machine gives it. Raises
        :class:`~service.captain.lanes.lane.IllegalLaneEvent` (and changes nothing) for an event the state
        refuses, or a turn's arrival without its record.
        """
        if isinstance(event, TurnArrived) != (turn is not None):
            raise IllegalLaneEvent(f"lane {self.key}: a turn's record rides with its TurnArrived, and only there")
        actions = self.machine.handle(event, self.kit.clock.boottime())
        for action in actions:
            match action:
                case StartRun(turn_id=turn_id, run_id=run_id):
                    slot = self._seat(turn_id, turn)
                    self._join(action)
                    self._start(slot, run_id)
                case HoldSteer(turn_id=turn_id):
                    self._seat(turn_id, turn)  # accepted, not streaming: it waits here and joins when flushed
                case Steer(turn_id=turn_id):
                    slot = self._seat(turn_id, turn)
                    self._join(action)
                    self._steer(slot)
                case FlushSteers(turn_ids=turn_ids):
                    self._join(action)
                    for held in turn_ids:
                        self._steer(self.slots[held])
                case AbortAgent(run_id=run_id, reason=reason):
                    self._abort(run_id, reason)
                case Finish(owner=owner, steerers=steerers):
                    self._finish(owner, steerers)
                case Fail(turn_ids=turn_ids, code=code):
                    for turn_id in turn_ids:
                        self._resolve(turn_id, TurnResult.failed(code, turn_id=turn_id))
                case DropLane():
                    self.kit.drop(self)
                case _:
                    assert_never(action)
        return actions

    def _seat(self, turn_id: str, turn: NewTurn | None) -> TurnSlot:
        assert turn is not None  # feed() checked it: the machine names a new turn only for a TurnArrived
        slot = self.slots[turn_id] = TurnSlot(turn_id, turn, turn.images)
        return slot

    def _join(self, action: StartRun | Steer | FlushSteers) -> None:
        """Tell ``joins`` which deliveries become part of the live run: durable before the agent sees them,
        so a crash from now on is charged to them."""
        if self.kit.joins is not None and self.machine.run_id is not None:
            self.kit.joins(self.machine.run_id, tuple(self.slots[t].turn.delivery.delivery_id for t in joining(action)))

    def _start(self, slot: TurnSlot, run_id: str) -> None:
        self._stamp(slot)
        self.run_started_boot = self.last_event_boot = self.kit.clock.boottime()
        self.capture.media.clear()
        self.typing_sent, self.text_so_far = False, ""
        self.owner_task = asyncio.create_task(self._own(slot, run_id), name=f"lane-run-{run_id}")

    async def _own(self, slot: TurnSlot, run_id: str) -> None:
        """The owner task: the run (:func:`service.captain.lanes.runner.own`); one that broke outside the model ends here."""
        kit = self.kit
        owner = runner.Owner(
            key=self.key, room=self.room, agent=self.agent, meter=self.meter, spending=kit.spending,
            backlog=None if self.plan.contained or not self.fresh else self.backlog,
            contained=self.plan.contained, shutting_down=kit.shutting_down,
        )
        code = await runner.own(owner, slot, run_id)
        if code is not None:  # an answer's end came in through the agent's RunEnd (on_event)
            self.feed(RunEnded(code, run_id))

    def _stamp(self, slot: TurnSlot) -> None:
        """Attribute what the run's tools do to ``slot``'s author and message (a steer takes them over)."""
        self.capture.actor_id = slot.turn.trigger.author.id
        self.capture.message_id = slot.turn.trigger.message_id

    def _steer(self, slot: TurnSlot) -> None:
        self._stamp(slot)
        agent = self.agent
        if slot.images.has_files and agent.queued_images + slot.images.count > self.kit.settings.steer_max_images:
            # a steered picture is read into memory until the run's next step: past the bound the
            # message is steered with its words and the prompt says its pictures were not shown
            log.warning("lane %s: steering queue holds %d images; turn %s's %d not shown",
                        self.key, agent.queued_images, slot.turn_id, slot.images.count)
            slot.images = slot.images.without_files(OVER_STEER_LIMIT)
        try:
            steered = agent.steer(runner.turn_message(slot, slot.turn.backlog or None))
        except (OSError, UnsupportedImage):
            log.warning("lane %s: stored images of steered turn %s unreadable; steering the text", self.key, slot.turn_id)
            slot.images = slot.images.without_files()
            steered = agent.steer(runner.turn_message(slot, slot.turn.backlog or None))
        if not steered:
            log.warning("lane %s: run was not live for steered turn %s", self.key, slot.turn_id)

    def _abort(self, run_id: str, reason: str) -> None:
        log.info("lane %s: aborting run %s (%s)", self.key, run_id, reason)
        if self.agent.is_running:
            self.agent.abort(reason)
        elif self.owner_task is not None:
            self.owner_task.cancel()  # accepted but not running yet (waiting for history)

    def _finish(self, owner: str, steerers: tuple[str, ...]) -> None:
        """The owner answers with the run's reply; the steerers were absorbed into it."""
        outcome = self.last_outcome
        text = outcome.text.strip() if outcome is not None else ""
        if not text:
            missing = FAILURE_CODES[OutcomeKind.RESPONSE_MISSING]
            for turn_id in (owner, *steerers):
                self._resolve(turn_id, TurnResult.failed(missing, turn_id=turn_id))
            return
        if prompt.is_silent(text):
            for turn_id in (owner, *steerers):
                self._resolve(turn_id, TurnResult.silent(turn_id=turn_id))
            return
        media = tuple(self.capture.media[-1:])
        text = self.kit.redact(text)
        try:
            self.lane_log.said(text)
        except OSError as exc:  # the answer stands; only its line in the lane log is lost
            log.error("lane %s: reply to turn %s not in the lane log (%s)", self.key, owner, disk_failure(exc) or exc.strerror)
        # a run stopped at a run cap answers with its words so far, and its turns say why it stopped short
        assert outcome is not None  # (there is text)
        cut = FAILURE_CODES[outcome.kind] if outcome.kind is OutcomeKind.RUN_BUDGET_EXCEEDED else None
        self._resolve(owner, TurnResult.settled(text, media, turn_id=owner, code=cut))
        for turn_id in steerers:
            self._resolve(turn_id, TurnResult.absorbed(turn_id=turn_id, code=cut))

    def _resolve(self, turn_id: str, result: TurnResult) -> None:
        slot = self.slots.pop(turn_id, None)
        if slot is not None and not slot.turn.future.done():
            slot.turn.future.set_result(result)

    # ------------------------------------------------------------------ agent events

    def on_event(self, event: AgentEvent) -> None:
        """One event of the lane's agent: the run's start and end go to the machine, the rest to the body."""
        self.last_event_boot = self.kit.clock.boottime()
        if isinstance(event, RunStart):
            self.feed(RunStreaming())
        elif isinstance(event, ProviderWait):
            self.paced = event.waiting
        elif isinstance(event, TurnStart | RetryStart):
            self.text_so_far = ""
        elif isinstance(event, TextDelta):
            self.watch_typing(event.text)
        elif isinstance(event, ToolStart | ToolEnd):
            self._tell_tool(event)
        elif isinstance(event, RunEnd):
            self.last_outcome = event.outcome
            self.feed(RunEnded(runner.failure_code(event.outcome), event.run_id))

    def watch_typing(self, delta: str) -> None:
        """Send ``typing`` once per run, the first time the reply can no longer become ``[[stay-silent]]``."""
        if self.typing_sent:
            return
        self.text_so_far += delta
        if prompt.may_become_silent(self.text_so_far):
            return
        self.typing_sent = True
        owner = self.owner
        if owner is not None and owner.accepted_at is not None:  # the reply will speak: its first words are here
            METER.observe(TURN_FIRST_WORDS, self.kit.clock.monotonic() - owner.accepted_at)
        if owner is not None and owner.conn is not None and not owner.conn.closed:
            self._send(send_typing(owner.conn, owner.delivery_id), "typing")

    def _tell_tool(self, event: ToolStart | ToolEnd) -> None:
        """Tell the body (content-free) that one of the run owner's tool calls started or ended."""
        owner = self.owner
        if owner is not None and owner.conn is not None and not owner.conn.closed:
            self._send(send_tool(owner.conn, tool_activity(owner.delivery_id, event, self.kit.redact)), "tool")

    def _send(self, send: Coroutine[Any, Any, None], name: str) -> None:
        """A fire-and-forget send, held in the kit's set until done (the captain cancels the rest on close); with
        the set full (a body that stopped reading) it is skipped: typing and tool cards only decorate a turn."""
        try:
            self.kit.background.spawn(send, name=name)
        except TaskSetFull:
            log.debug("lane %s: %s not sent: %d sends already in flight", self.key, name, len(self.kit.background))


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
