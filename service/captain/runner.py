"""Turn execution: building a lane's agent, carrying out the lane machine's actions, the owner's run.

Agent events drive the machine (``RunStart`` → streaming, ``RunEnd`` →
results), the typing watcher and the tool notifications. Before a delivery is
handed to a run (as its owner, or steered into it), ``joins`` is told which
run it joins, so a crash during that run is counted against it and against
nobody who was merely waiting (:mod:`service.captain.deliveries`). The run id
the lane machine names is the one the agent runs (and logs) under.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from clankie.clock import Clock
from clankie.errors import ChannelBroken, ChannelClosed, RemoteError, RequestTimeout
from clankie.metrics import METER
from clankie.protocol import (
    Code,
    HistoryMessage,
    HistoryReply,
    HistoryRequest,
    Room,
    TextUpdate,
    TextUpdateReply,
    Trigger,
    TurnResult,
)
from clankie.redact import Redactor
from clankie.settings import Settings
from service.agent.agent import Agent, AgentConfig
from service.agent.content import UnsupportedImage
from service.agent.events import (
    AgentEvent,
    ProviderWait,
    RetryStart,
    RunEnd,
    RunStart,
    TextDelta,
    ToolEnd,
    ToolStart,
    TurnStart,
)
from service.agent.governor import Governor
from service.agent.model import Provider
from service.agent.outcome import OutcomeKind
from service.agent.session import SessionTree
from service.agent.tools import Tool
from service.captain import dropped, prompt
from service.captain.inbound import OVER_STEER_LIMIT, TurnImages
from service.captain.lane import (
    AbortAgent,
    Action,
    DropLane,
    Fail,
    Finish,
    FlushSteers,
    HoldSteer,
    Lane,
    LaneState,
    RunEnded,
    RunStreaming,
    StartRun,
    Steer,
)
from service.captain.live import (
    FAILURE_CODES,
    SESSION_FAILED,
    SHUTDOWN_CODE,
    LanePlan,
    LiveLane,
    TurnSlot,
    failure_code,
    joined_by,
    lane_message,
    send_tool,
    send_typing,
    tool_activity,
)
from service.captain.records import LaneLog, disk_failure
from service.captain.registry import LaneRegistry
from service.captain.spending import NOTICE, Spending
from service.captain.tools import DeliveryContext, TurnCapture

log = logging.getLogger(__name__)

HISTORY_TIMEOUT = 30.0


def new_boundary() -> str:
    """A turn's boundary around its Discord text (:func:`service.captain.prompt.boundary_lines`): 64 random bits."""
    return secrets.token_hex(8)

LIVE = (LaneState.STARTING, LaneState.RUNNING)

class BudgetSpent(Exception):
    """A turn's budget (tree, room or person) is spent before it starts: it fails without a model request."""


NewTurn = tuple[DeliveryContext, Trigger, tuple[HistoryMessage, ...], asyncio.Future[TurnResult], TurnImages]


@dataclass(frozen=True, kw_only=True)
class RunnerDeps:
    settings: Settings
    clock: Clock
    provider: Provider | None
    registry: LaneRegistry
    tools: Callable[[TurnCapture, LanePlan], list[Tool]]
    joins: Callable[[str, tuple[str, ...]], None] | None
    shutting_down: Callable[[], bool]
    governor: Governor | None = None  # the service's one provider governor (None: a private one per agent)
    spending: Spending | None = None  # budgets, cache lifetimes and health (None: no budgets, 5-minute caching)


class LaneRunner:
    """Runs the turns of every lane in one registry."""

    def __init__(self, deps: RunnerDeps) -> None:
        self._s = deps.settings
        self._clock = deps.clock
        self._provider = deps.provider
        self._registry = deps.registry
        self._tools = deps.tools
        self._joins = deps.joins
        self._shutting_down = deps.shutting_down
        self._governor = deps.governor
        self._spending = deps.spending
        self.background: set[asyncio.Task[None]] = set()  # fire-and-forget sends (typing), held until done
        self._config = AgentConfig.from_settings(deps.settings)  # window, compaction budget, session retention
        self._redact = Redactor.of(deps.settings)  # the Anthropic key never leaves in a reply or a tool card

    def build(self, plan: LanePlan, key: str, room: Room, session: SessionTree) -> LiveLane:
        """A lane's live objects over ``session``, subscribed to its agent's events."""
        capture = TurnCapture(room=room)
        assert self._provider is not None  # the captain opens no lane without a provider
        meter = self._spending.meter(key, room, lambda: capture.actor_id or None) if self._spending else None
        agent = Agent(
            session=session,
            provider=self._provider,
            tools=self._tools(capture, plan),
            clock=self._clock,
            system_prompt=prompt.system_prompt(self._s.character_id, plan.privileged),
            config=self._config,
            governor=self._governor,
            meter=meter,
        )
        lane = LiveLane(
            key=key,
            plan=plan,
            room=room,
            machine=Lane(key),
            agent=agent,
            capture=capture,
            lane_log=LaneLog(self._registry.paths.lane_log(room), room, self._clock),
            meter=meter,
        )
        lane.unsubscribe = agent.subscribe(lambda event: self.on_event(lane, event))
        return lane

    # ------------------------------------------------------------------ actions

    def apply(self, lane: LiveLane, actions: list[Action], new: NewTurn | None = None) -> None:
        for action in actions:
            if isinstance(action, StartRun | HoldSteer | Steer):
                assert new is not None
                slot = TurnSlot(action.turn_id, *new)
                lane.slots[action.turn_id] = slot
            if self._joins is not None and (joined := joined_by(lane, action)) is not None:
                self._joins(*joined)  # durable before the agent sees them: a crash now is charged to them
            if isinstance(action, StartRun):
                lane.capture.owner = slot.delivery
                lane.run_id = action.run_id
                self._stamp(lane, slot)
                lane.run_started_boot = lane.last_event_boot = self._clock.boottime()
                lane.owner_task = asyncio.create_task(self._own(lane, slot, action.run_id), name=f"lane-run-{action.run_id}")
            elif isinstance(action, Steer):
                self._steer(lane, slot)
            elif isinstance(action, FlushSteers):
                for turn_id in action.turn_ids:
                    self._steer(lane, lane.slots[turn_id])
            elif isinstance(action, AbortAgent):
                log.info("lane %s: aborting run %s (%s)", lane.key, action.run_id, action.reason)
                if lane.agent.is_running:
                    lane.agent.abort(action.reason)
                elif lane.owner_task is not None:
                    lane.owner_task.cancel()
            elif isinstance(action, Finish):
                self._finish(lane, action)
            elif isinstance(action, Fail):
                for turn_id in action.turn_ids:
                    self._resolve(lane, turn_id, TurnResult(outcome="failed", turn_id=turn_id, code=action.code))
            elif isinstance(action, DropLane):
                self._registry.drop(lane)

    def _stamp(self, lane: LiveLane, slot: TurnSlot) -> None:
        lane.capture.actor_id = slot.trigger.author.id
        lane.capture.message_id = slot.trigger.message_id

    def _steer(self, lane: LiveLane, slot: TurnSlot) -> None:
        self._stamp(lane, slot)
        if slot.images.has_files and lane.agent.queued_images + slot.images.count > self._s.steer_max_images:
            # a steered picture is read into memory until the run's next step: past the bound the
            # message is steered with its words and the prompt says its pictures were not shown
            log.warning("lane %s: steering queue holds %d images; turn %s's %d not shown",
                        lane.key, lane.agent.queued_images, slot.turn_id, slot.images.count)
            slot.images = slot.images.without_files(OVER_STEER_LIMIT)
        try:
            steered = lane.agent.steer(lane_message(slot, slot.backlog or None, new_boundary()))
        except (OSError, UnsupportedImage):
            log.warning("lane %s: stored images of steered turn %s unreadable; steering the text", lane.key, slot.turn_id)
            slot.images = slot.images.without_files()
            steered = lane.agent.steer(lane_message(slot, slot.backlog or None, new_boundary()))
        if not steered:
            log.warning("lane %s: run was not live for steered turn %s", lane.key, slot.turn_id)

    def _finish(self, lane: LiveLane, action: Finish) -> None:
        outcome = lane.last_outcome
        text = outcome.text.strip() if outcome is not None else ""
        if not text:
            missing = FAILURE_CODES[OutcomeKind.RESPONSE_MISSING]
            for turn_id in (action.owner, *action.steerers):
                self._resolve(lane, turn_id, TurnResult(outcome="failed", turn_id=turn_id, code=missing))
            return
        if prompt.is_silent(text):
            for turn_id in (action.owner, *action.steerers):
                self._resolve(lane, turn_id, TurnResult(outcome="silent", turn_id=turn_id))
            return
        media = tuple(lane.capture.media[-1:])
        text = self._redact(text)
        try:
            lane.lane_log.said(text)
        except OSError as exc:  # the answer stands; only its line in the lane log is lost
            log.error("lane %s: reply to turn %s not in the lane log (%s)", lane.key, action.owner,
                      disk_failure(exc) or exc.strerror)
        self._resolve(lane, action.owner, TurnResult(outcome="settled", turn_id=action.owner, text=text, media=media))
        for turn_id in action.steerers:
            self._resolve(lane, turn_id, TurnResult(outcome="absorbed", turn_id=turn_id))

    def _resolve(self, lane: LiveLane, turn_id: str, result: TurnResult) -> None:
        slot = lane.slots.pop(turn_id, None)
        if slot is not None and not slot.future.done():
            slot.future.set_result(result)

    # ------------------------------------------------------------------ the owner's run

    async def _own(self, lane: LiveLane, slot: TurnSlot, run_id: str) -> None:
        code: str | None = None
        try:
            if self._spending is not None and self._spending.spent_key(lane.room, slot.trigger.author.id) is not None:
                raise BudgetSpent  # no history call, no model request
            if lane.meter is not None:
                lane.meter.begin_run()
            history: tuple[HistoryMessage, ...] | None = None
            if lane.fresh and not lane.plan.contained:
                history = await self._history(lane, slot)
                lane.fresh = history is None  # no bridge or a failed call: the next run reads cold again
            # a catch-up turn's buffered messages were never heard by the lane: warm or cold, they ride along;
            # a privileged one-shot outside a trusted room reads only its actor's own trigger (LanePlan.contained)
            context = None if lane.plan.contained else history or slot.backlog or None
            lane.capture.media.clear()
            lane.typing_sent, lane.text_so_far = False, ""
            try:
                await lane.agent.run(lane_message(slot, context, new_boundary()), run_id=run_id)
            except (OSError, UnsupportedImage):
                if not slot.images.has_files:
                    raise
                log.warning("lane %s: stored images of run %s unreadable; running the text", lane.key, run_id)
                slot.images = slot.images.without_files()
                await lane.agent.run(lane_message(slot, context, new_boundary()), run_id=run_id)
        except BudgetSpent:
            code = Code.CAPTAIN_BUDGET_EXHAUSTED
            log.warning("lane %s: turn %s not run: today's budget is spent", lane.key, slot.turn_id)
            await self._budget_notice(lane, slot)
        except asyncio.CancelledError:
            code = SHUTDOWN_CODE if self._shutting_down() else SESSION_FAILED
        except OSError as exc:  # the disk refused the session: one line with its code, the run's turns fail with it
            code = disk_failure(exc)
            if code is None:
                log.exception("lane %s: run %s failed outside the model", lane.key, run_id)
                code = SESSION_FAILED
            else:
                log.error("lane %s: run %s of delivery %s ended: its session line was refused (%s: %s)",
                          lane.key, run_id, slot.delivery.delivery_id, code, exc.strerror)
        except Exception:
            log.exception("lane %s: run %s failed outside the model", lane.key, run_id)
            code = SESSION_FAILED
        if code is not None and lane.machine.state in LIVE and lane.machine.run_id == run_id:
            self.apply(lane, lane.machine.handle(RunEnded(code), self._clock.boottime()))
        if lane.meter is not None:
            lane.meter.end_run()
        if lane.plan.kind == "oneshot" and lane.machine.state is LaneState.IDLE:
            self._registry.drop(lane)

    async def _budget_notice(self, lane: LiveLane, slot: TurnSlot) -> None:
        """An addressed turn refused by a spent budget: one templated line, at most once per room an hour."""
        owner = slot.delivery
        if slot.trigger.unprompted or slot.backlog or owner.conn is None or owner.conn.closed:
            return
        assert self._spending is not None
        if not self._spending.notice_due(lane.room):
            return
        try:
            await owner.conn.request("text_update", TextUpdate(delivery_id=owner.delivery_id, text=NOTICE),
                                     expect=TextUpdateReply, timeout=HISTORY_TIMEOUT)
        except (RemoteError, ChannelBroken, ChannelClosed, RequestTimeout) as exc:
            log.warning("lane %s: the budget notice was not posted (%s)", lane.key, type(exc).__name__)

    async def _history(self, lane: LiveLane, slot: TurnSlot) -> tuple[HistoryMessage, ...] | None:
        """The room's backlog; None when it could not be read (no bridge connection, or the call failed)."""
        conn, limit = slot.delivery.conn, self._s.discord_context_messages
        if limit == 0:
            return ()
        if conn is None or conn.closed:
            return None
        lane.history_requests += 1
        request = HistoryRequest(
            delivery_id=slot.delivery.delivery_id, room=lane.room, before_message_id=slot.trigger.message_id, limit=limit
        )
        try:
            reply = await conn.request("history", request, expect=HistoryReply, timeout=HISTORY_TIMEOUT)
        except (RemoteError, ChannelBroken, ChannelClosed, RequestTimeout) as exc:
            log.warning("lane %s: no history for a cold lane (%s)", lane.key, type(exc).__name__)
            return None
        # a message judged poison never comes back through the room's history (service.captain.dropped)
        return dropped.without(reply.messages, dropped.dropped_ids(self._registry.paths, lane.room))[-limit:]

    # ------------------------------------------------------------------ agent events

    def on_event(self, lane: LiveLane, event: AgentEvent) -> None:
        lane.last_event_boot = self._clock.boottime()
        machine = lane.machine
        if isinstance(event, RunStart):
            if machine.state is LaneState.STARTING:
                self.apply(lane, machine.handle(RunStreaming(), lane.last_event_boot))
            elif machine.state is LaneState.DROPPED:
                lane.agent.abort("stalled")
        elif isinstance(event, ProviderWait):
            lane.paced = event.waiting
        elif isinstance(event, TurnStart | RetryStart):
            lane.text_so_far = ""
        elif isinstance(event, TextDelta):
            self.watch_typing(lane, event.text)
        elif isinstance(event, ToolStart | ToolEnd):
            self._tell_tool(lane, event)
        elif isinstance(event, RunEnd):
            lane.last_outcome = event.outcome
            if machine.state in LIVE:
                code = failure_code(event.outcome)
                self.apply(lane, machine.handle(RunEnded(code), lane.last_event_boot))

    def watch_typing(self, lane: LiveLane, delta: str) -> None:
        if lane.typing_sent:
            return
        lane.text_so_far += delta
        if prompt.may_become_silent(lane.text_so_far):
            return
        lane.typing_sent = True
        owner = lane.capture.owner
        if owner is not None and owner.accepted_at is not None:  # the reply will speak: its first words are here
            METER.observe("clankie_turn_first_words_seconds", self._clock.monotonic() - owner.accepted_at)
        if owner is None or owner.conn is None or owner.conn.closed:
            return
        task = asyncio.create_task(send_typing(owner.conn, owner.delivery_id), name="typing")
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def _tell_tool(self, lane: LiveLane, event: ToolStart | ToolEnd) -> None:
        """Tell the body (content-free) that one of the run owner's tool calls started or ended."""
        owner = lane.capture.owner
        if owner is None or owner.conn is None or owner.conn.closed:
            return
        task = asyncio.create_task(send_tool(owner.conn, tool_activity(owner.delivery_id, event, self._redact)), name="tool")
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def aclose(self) -> None:
        for task in list(self.background):
            task.cancel()
        if self.background:
            await asyncio.gather(*self.background, return_exceptions=True)
