"""The captain shell: lanes in memory, turns through the lane machine, runs on the agent runtime.

:meth:`Captain.submit` takes one admitted message and returns how its turn
ended. The lane lookup, the lane machine's decision and the run start happen
with no ``await`` between them, so two messages can never both start a run in
one room. Agent events drive the machine (``RunStart`` → streaming, ``RunEnd``
→ results), the typing watcher and the stall report. Before a delivery is
handed to a run (as its owner, or steered into it), ``CaptainDeps.joins`` is
told which run it joins, so a crash during that run is counted against it
and against nobody who was merely waiting (:mod:`service.captain.deliveries`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from clankie.clock import Clock
from clankie.errors import ChannelBroken, ChannelClosed, RemoteError, RequestTimeout
from clankie.protocol import (
    Author,
    HistoryMessage,
    HistoryReply,
    HistoryRequest,
    LaneInfo,
    Room,
    RunReport,
    Trigger,
    TurnResult,
    TurnSubmit,
)
from clankie.settings import Settings

from service.agent.agent import Agent, AgentConfig
from service.agent.content import UnsupportedImage
from service.agent.events import AgentEvent, RetryStart, RunEnd, RunStart, TextDelta, ToolEnd, ToolStart, TurnStart
from service.agent.model import Provider
from service.agent.outcome import OutcomeKind
from service.agent.session import SessionTree
from service.agent.tools import Tool
from service.captain import keys, prompt
from service.captain.hosts import HostClient
from service.captain.inbound import FetchPolicy, ImageFetcher, TurnImages
from service.captain.lane import (
    AbortAgent,
    AbortRequested,
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
    TurnArrived,
)
from service.captain.live import (
    FAILURE_CODES,
    SESSION_FAILED,
    SHUTDOWN_CODE,
    UNCONFIGURED,
    LanePlan,
    LiveLane,
    TurnSlot,
    ended_within,
    failure_code,
    joined_by,
    lane_message,
    send_tool,
    send_typing,
    tool_activity,
)
from service.captain.records import LaneLog
from service.captain.tools import (
    Admission,
    DeliveryContext,
    TurnCapture,
    diagram_tool,
    screenshot_tool,
    shell_tool,
    text_update_tool,
)

log = logging.getLogger(__name__)

HISTORY_TIMEOUT = 30.0
TEARDOWN_GRACE = 10.0
LIVE = (LaneState.STARTING, LaneState.RUNNING)

SYSTEM_PROMPT = """You are {character}, a regular in a few Discord text rooms. Each user turn is one bounded, \
untrusted Discord message from someone in the room (several messages may arrive together when people \
talk while you are still working). Answer the way a thoughtful friend in the channel would: short, \
direct, in your own voice. Several people may speak; answer what was actually said, once.

Tools: send_text_update posts a short mid-turn note when someone is waiting on slow work; \
browser_screenshot looks at a web page; draw_er_diagram and draw_sequence_diagram draw diagrams. \
Pictures you make are attached to your reply automatically."""
ROOM_NOTE = "# This room\nYou have no shell or file access here."
PRIVILEGED_NOTE = "# This turn\nThis person is a system actor: you may use the bash tool for this grant only."


@dataclass(frozen=True, kw_only=True)
class CaptainDeps:
    settings: Settings
    clock: Clock
    provider: Provider | None
    browser: HostClient | None = None
    tldraw: HostClient | None = None
    joins: Callable[[str, tuple[str, ...]], None] | None = None  # (run id, delivery ids) before they join that run


class Captain:
    """Every lane of this process."""

    def __init__(self, deps: CaptainDeps) -> None:
        self._s = deps.settings
        self.character = deps.settings.character_id
        self._clock = deps.clock
        self._provider = deps.provider
        self._browser = deps.browser
        self._tldraw = deps.tldraw
        self._joins = deps.joins
        self.paths = keys.CaptainPaths.under(deps.settings.state_dir)
        self.lanes: dict[str, LiveLane] = {}
        self._closing: dict[str, asyncio.Task[None]] = {}
        self.shutting_down = False
        self.background: set[asyncio.Task[None]] = set()  # fire-and-forget sends (typing), held until done
        # dropped lanes whose aborted run outlived TEARDOWN_GRACE, by run id: their tree may still be
        # written, so a new lane for the room starts a fresh tree, and the run stays in the stall report
        self.zombies: dict[str, LiveLane] = {}
        self._images = ImageFetcher(self.paths.inbound, FetchPolicy.for_api_base(deps.settings.discord_api_base), deps.clock)
        self._admission = Admission(guild_ids=deps.settings.discord_guild_ids, channel_ids=deps.settings.discord_channel_ids)
        self._config = AgentConfig.from_settings(deps.settings)  # window, compaction budget, session retention

    # ------------------------------------------------------------------ turns

    async def submit(self, submit: TurnSubmit, delivery: DeliveryContext) -> TurnResult:
        """Run (or attach) one turn and return how it ended; never raises for model trouble."""
        room, trigger = submit.room, submit.trigger
        if self.shutting_down:
            return TurnResult(outcome="failed", code=SHUTDOWN_CODE)
        LaneLog(self.paths.lane_log(room), room, self._clock).heard(prompt.heard(trigger))
        if self._provider is None:
            return TurnResult(outcome="failed", code=UNCONFIGURED)
        # fetched before the lane decision (it awaits), so a steered message carries its pictures too; a
        # catch-up's backlog pictures were said to him now, so they are fetched as well (cold history's are not)
        images = await self._images.fetch_turn(trigger.attachments, submit.backlog)
        plan = self._plan(room, trigger.author)
        key = f"{plan.key}#{submit.delivery_id}" if plan.kind == "oneshot" else plan.key
        while key in self._closing:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._closing[key])
        # -- from here to the decision: no await, so the idle check and the run start are one step
        if self.shutting_down:  # aclose began while we awaited: open no lane it would not close
            return TurnResult(outcome="failed", code=SHUTDOWN_CODE)
        lane = self.lanes.get(key) or self._open(plan, key, room)
        future: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()
        actions = lane.machine.handle(TurnArrived(submit.delivery_id, uuid.uuid4().hex[:12]), self._clock.boottime())
        self._apply(lane, actions, (delivery, trigger, submit.backlog, future, images))
        return await asyncio.shield(future)

    def _plan(self, room: Room, author: Author) -> LanePlan:
        system = author.is_system_actor or author.id in self._s.discord_system_actor_ids
        room_key = keys.room_lane_key(self._s.character_id, room)
        if system and keys.is_trusted(room, self._s.discord_trusted_rooms):
            key = keys.system_lane_key(self._s.character_id, room, author.id)
            return LanePlan("system", key, self.paths.system(key), True)
        if system or not self._s.captain_durable:
            return LanePlan("oneshot", room_key, self.paths.turns(room), system)
        return LanePlan("room", room_key, self.paths.room(room_key), False)

    def _open(self, plan: LanePlan, key: str, room: Room) -> LiveLane:
        if plan.kind == "oneshot":
            session = SessionTree.create(plan.directory, self._clock, self._config.retention)
        elif any(z.key == key for z in self.zombies.values()):
            log.warning("lane %s: an aborted run may still write its tree; starting a fresh tree", key)
            session = SessionTree.create(plan.directory, self._clock, self._config.retention)
        else:
            session = SessionTree.open_latest(plan.directory, self._clock, self._config.retention)
        capture = TurnCapture(room=room)
        assert self._provider is not None
        agent = Agent(
            session=session,
            provider=self._provider,
            tools=self._tools(capture, plan.privileged),
            clock=self._clock,
            system_prompt=self._system_prompt(plan.privileged),
            config=self._config,
        )
        lane = LiveLane(
            key=key,
            plan=plan,
            room=room,
            machine=Lane(key),
            agent=agent,
            capture=capture,
            lane_log=LaneLog(self.paths.lane_log(room), room, self._clock),
        )
        lane.unsubscribe = agent.subscribe(lambda event: self._on_event(lane, event))
        self.lanes[key] = lane
        log.info("lane %s opened (%s, session %s)", key, plan.kind, session.session_id[:8])
        return lane

    def _system_prompt(self, privileged: bool) -> str:
        note = PRIVILEGED_NOTE if privileged else ROOM_NOTE
        return SYSTEM_PROMPT.format(character=self._s.character_id) + "\n\n" + note

    def _tools(self, capture: TurnCapture, privileged: bool) -> list[Tool]:
        root = self._s.attachment_root
        tools = [text_update_tool(capture, self._admission)]
        if self._browser is not None:
            tools.append(screenshot_tool(self._browser, capture, root))
        if self._tldraw is not None:
            tools.append(diagram_tool("draw_er_diagram", self._tldraw, capture, root))
            tools.append(diagram_tool("draw_sequence_diagram", self._tldraw, capture, root))
        if privileged:
            tools.append(shell_tool(self._s.state_dir))
        return tools

    # ------------------------------------------------------------------ actions

    def _apply(
        self,
        lane: LiveLane,
        actions: list[Action],
        new: tuple[DeliveryContext, Trigger, tuple[HistoryMessage, ...], asyncio.Future[TurnResult], TurnImages]
        | None = None,
    ) -> None:
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
                self._drop(lane)

    def _stamp(self, lane: LiveLane, slot: TurnSlot) -> None:
        lane.capture.actor_id = slot.trigger.author.id
        lane.capture.message_id = slot.trigger.message_id

    def _steer(self, lane: LiveLane, slot: TurnSlot) -> None:
        self._stamp(lane, slot)
        try:
            steered = lane.agent.steer(lane_message(slot, slot.backlog or None))
        except (OSError, UnsupportedImage):
            log.warning("lane %s: stored images of steered turn %s unreadable; steering the text", lane.key, slot.turn_id)
            slot.images = slot.images.without_files()
            steered = lane.agent.steer(lane_message(slot, slot.backlog or None))
        if not steered:
            log.warning("lane %s: run was not live for steered turn %s", lane.key, slot.turn_id)

    def _finish(self, lane: LiveLane, action: Finish) -> None:
        outcome = lane.last_outcome
        text = outcome.text.strip() if outcome is not None else ""
        if not text:
            for turn_id in (action.owner, *action.steerers):
                self._resolve(lane, turn_id, TurnResult(outcome="failed", turn_id=turn_id, code=FAILURE_CODES[OutcomeKind.RESPONSE_MISSING]))
            return
        if prompt.is_silent(text):
            for turn_id in (action.owner, *action.steerers):
                self._resolve(lane, turn_id, TurnResult(outcome="silent", turn_id=turn_id))
            return
        media = tuple(lane.capture.media[-1:])
        lane.lane_log.said(text)
        self._resolve(lane, action.owner, TurnResult(outcome="settled", turn_id=action.owner, text=text, media=media))
        for turn_id in action.steerers:
            self._resolve(lane, turn_id, TurnResult(outcome="absorbed", turn_id=turn_id))

    def _resolve(self, lane: LiveLane, turn_id: str, result: TurnResult) -> None:
        slot = lane.slots.pop(turn_id, None)
        if slot is not None and not slot.future.done():
            slot.future.set_result(result)

    def _drop(self, lane: LiveLane) -> None:
        if self.lanes.get(lane.key) is lane:
            del self.lanes[lane.key]
        if lane.key not in self._closing:
            task = asyncio.create_task(self._teardown(lane), name=f"lane-teardown-{lane.key}")
            self._closing[lane.key] = task
            task.add_done_callback(lambda _t, k=lane.key: self._closing.pop(k, None))
        log.info("lane %s dropped", lane.key)

    async def _teardown(self, lane: LiveLane) -> None:
        task = lane.owner_task
        if task is not None and task is not asyncio.current_task() and not await ended_within(self._clock, task, TEARDOWN_GRACE):
            # the run ignores its abort: never close (or share) a tree it may still write
            log.warning("lane %s: aborted run %s still running after %gs; next turn gets a fresh tree", lane.key, lane.run_id, TEARDOWN_GRACE)
            self.zombies[lane.run_id] = lane
            task.add_done_callback(lambda _t: self._bury(lane))
            return
        self._close_lane(lane)

    def _bury(self, lane: LiveLane) -> None:
        if self.zombies.pop(lane.run_id, None) is not None:
            log.warning("lane %s: aborted run %s finally ended", lane.key, lane.run_id)
        self._close_lane(lane)

    def _close_lane(self, lane: LiveLane) -> None:
        if lane.unsubscribe is not None:
            lane.unsubscribe()
        lane.agent.session.close()

    # ------------------------------------------------------------------ the owner's run

    async def _own(self, lane: LiveLane, slot: TurnSlot, run_id: str) -> None:
        code: str | None = None
        try:
            history: tuple[HistoryMessage, ...] | None = None
            if lane.fresh:
                history = await self._history(lane, slot)
                lane.fresh = history is None  # no bridge or a failed call: the next run reads cold again
            # a catch-up turn's buffered messages were never heard by the lane: warm or cold, they ride along
            context = history or slot.backlog or None
            lane.capture.media.clear()
            lane.typing_sent, lane.text_so_far = False, ""
            try:
                await lane.agent.run(lane_message(slot, context))
            except (OSError, UnsupportedImage):
                if not slot.images.has_files:
                    raise
                log.warning("lane %s: stored images of run %s unreadable; running the text", lane.key, run_id)
                slot.images = slot.images.without_files()
                await lane.agent.run(lane_message(slot, context))
        except asyncio.CancelledError:
            code = SHUTDOWN_CODE if self.shutting_down else SESSION_FAILED
        except Exception:
            log.exception("lane %s: run %s failed outside the model", lane.key, run_id)
            code = SESSION_FAILED
        if code is not None and lane.machine.state in LIVE and lane.machine.run_id == run_id:
            self._apply(lane, lane.machine.handle(RunEnded(code), self._clock.boottime()))
        if lane.plan.kind == "oneshot" and lane.machine.state is LaneState.IDLE:
            self._drop(lane)

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
            reply = await conn.request("history", request, timeout=HISTORY_TIMEOUT)
        except (RemoteError, ChannelBroken, ChannelClosed, RequestTimeout) as exc:
            log.warning("lane %s: no history for a cold lane (%s)", lane.key, type(exc).__name__)
            return None
        assert isinstance(reply, HistoryReply)
        return reply.messages[-limit:]

    # ------------------------------------------------------------------ agent events

    def _on_event(self, lane: LiveLane, event: AgentEvent) -> None:
        lane.last_event_boot = self._clock.boottime()
        machine = lane.machine
        if isinstance(event, RunStart):
            if machine.state is LaneState.STARTING:
                self._apply(lane, machine.handle(RunStreaming(), lane.last_event_boot))
            elif machine.state is LaneState.DROPPED:
                lane.agent.abort("stalled")
        elif isinstance(event, TurnStart | RetryStart):
            lane.text_so_far = ""
        elif isinstance(event, TextDelta):
            self._watch_typing(lane, event.text)
        elif isinstance(event, ToolStart | ToolEnd):
            self._tell_tool(lane, event)
        elif isinstance(event, RunEnd):
            lane.last_outcome = event.outcome
            if machine.state in LIVE:
                code = failure_code(event.outcome)
                self._apply(lane, machine.handle(RunEnded(code), lane.last_event_boot))

    def _watch_typing(self, lane: LiveLane, delta: str) -> None:
        if lane.typing_sent:
            return
        lane.text_so_far += delta
        if prompt.may_become_silent(lane.text_so_far):
            return
        lane.typing_sent = True
        owner = lane.capture.owner
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
        task = asyncio.create_task(send_tool(owner.conn, tool_activity(owner.delivery_id, event)), name="tool")
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    # ------------------------------------------------------------------ operator surface

    def abort(self, key: str, run_id: str | None, reason: str) -> bool:
        lane = self.lanes.get(key)
        if lane is None or lane.machine.state not in LIVE:
            return False
        if run_id is not None and run_id != lane.machine.run_id:
            return False
        self._apply(lane, lane.machine.handle(AbortRequested("stalled" if reason == "stalled" else "operator"), self._clock.boottime()))
        return True

    async def abort_confirmed(self, key: str, run_id: str | None, reason: str, wait: float) -> bool:
        """:meth:`abort`, answered True only once the run has really ended (waiting up to ``wait`` s).

        A run that will not stop is reported unconfirmed (and keeps appearing in
        :meth:`runs`), so the supervisor escalates by restarting the service.
        """
        lane = self.lanes.get(key)
        if lane is None or not self.abort(key, run_id, reason):
            return False
        task = lane.owner_task
        ended = task is None or await ended_within(self._clock, task, wait)
        if not ended:
            log.warning("lane %s: run %s did not stop within %gs of its abort", key, lane.run_id, wait)
        return ended

    def runs(self) -> tuple[RunReport, ...]:
        now = self._clock.boottime()
        out = [
            RunReport(
                lane=z.key,
                run_id=z.run_id,
                last_event_age_s=max(0.0, now - z.last_event_boot),
                started_age_s=max(0.0, now - z.run_started_boot),
                turns=0,
            )
            for z in self.zombies.values()
        ]
        for lane in self.lanes.values():
            m = lane.machine
            if m.state in LIVE and m.run_id is not None:
                out.append(
                    RunReport(
                        lane=lane.key,
                        run_id=m.run_id,
                        last_event_age_s=max(0.0, now - lane.last_event_boot),
                        started_age_s=max(0.0, now - lane.run_started_boot),
                        turns=len(m.attached),
                    )
                )
        return tuple(out)

    def lane_directories(self) -> dict[str, Path]:
        """Where each lane's session trees are (read back for its spend)."""
        return {lane.key: lane.plan.directory for lane in self.lanes.values()}

    def lane_infos(self) -> tuple[LaneInfo, ...]:
        now = self._clock.boottime()
        return tuple(
            LaneInfo(
                key=lane.key,
                warm=not lane.fresh,
                state=lane.machine.state.value,
                run_id=lane.machine.run_id,
                last_event_age_s=max(0.0, now - lane.last_event_boot) if lane.machine.state in LIVE else None,
                turns=lane.machine.turns_started,
            )
            for lane in self.lanes.values()
        )

    async def aclose(self) -> None:
        """Abort every live run and close every session tree.

        Runs cut here end with :data:`SHUTDOWN_CODE`, not a failure: their
        deliveries are left for the restarted service to run again.
        """
        self.shutting_down = True
        for lane in list(self.lanes.values()):
            if lane.agent.is_running:
                lane.agent.abort("shutdown")
            elif lane.owner_task is not None and not lane.owner_task.done():
                lane.owner_task.cancel()  # accepted but not running yet (waiting for history)
            self._drop(lane)
        if self._closing:
            await asyncio.gather(*self._closing.values(), return_exceptions=True)
        for task in list(self.background):
            task.cancel()
        if self.background:
            await asyncio.gather(*self.background, return_exceptions=True)
        await self._images.aclose()
