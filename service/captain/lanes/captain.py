"""The captain: one admitted message in, how its turn ended out; the facade over the lane modules.

:meth:`Captain.submit` takes one admitted message and returns how its turn
ended. The lane lookup, the lane machine's decision and the run start happen
with no ``await`` between them, so two messages can never both start a run in
one room. The jobs live apart: which lanes are live and the LRU bound on them
(:mod:`service.captain.lanes.registry`), each lane's shell, the one place its
machine is fed (:mod:`service.captain.lanes.shell`), the owner's run
(:mod:`service.captain.lanes.runner`), what is reported about them
(:mod:`service.captain.lanes.reports`) and the words said to the model
(:mod:`service.captain.lanes.prompt`). The run id is minted here, once, and is the
id the agent runs and logs under.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from clankie.clock import Clock
from clankie.journald import lane_hash
from clankie.protocol import Author, LaneInfo, Room, RunReport, TurnResult, TurnSubmit
from clankie.redact import Redactor
from clankie.settings import Settings
from clankie.store.lane_ports import LaneTreeStore
from clankie.tasks import TaskSet
from service.agent.agent import AgentConfig
from service.agent.governor import Governor
from service.agent.model import Provider
from service.agent.routes import Routes
from service.agent.tools import Tool
from service.captain.lanes import dropped, keys, listing, prompt, reports
from service.captain.lanes.keys import LanePlan
from service.captain.lanes.lane import AbortAgent, AbortRequested, ShutDown, TurnArrived
from service.captain.lanes.lane_log import LaneLog
from service.captain.lanes.live import SESSION_FAILED, SHUTDOWN_CODE, UNCONFIGURED, NewTurn, ended_within
from service.captain.lanes.registry import TEARDOWN_GRACE, LaneRegistry
from service.captain.lanes.shell import LaneKit, LaneShell
from service.captain.media import FetchPolicy, ImageFetcher
from service.captain.records import disk_failure
from service.captain.spend import Spending
from service.captain.tools import (
    Admission,
    DeliveryContext,
    HostClient,
    TurnCapture,
    diagram_tool,
    redacted,
    screenshot_tool,
    shell_tool,
    text_update_tool,
)

__all__ = ["SESSION_FAILED", "SHUTDOWN_CODE", "TEARDOWN_GRACE", "Captain", "CaptainDeps"]

log = logging.getLogger(__name__)

BACKGROUND_MAX = 1024  # typing and tool-card sends in flight across the lanes; past it one is skipped (shell._send)


@dataclass(frozen=True, kw_only=True)
class CaptainDeps:
    settings: Settings
    clock: Clock
    provider: Provider | None
    browser: HostClient | None = None
    tldraw: HostClient | None = None
    joins: Callable[[str, tuple[str, ...]], None] | None = None  # (run id, delivery ids) before they join that run
    governor: Governor | None = None  # every lane's model calls pass it
    spending: Spending | None = None  # budgets before every model call, cache lifetimes by pace, cache health
    routes: Routes | None = None  # the model's routes, each with its governor (None: the provider alone, through governor)
    lane_store: Callable[[LanePlan], Path | LaneTreeStore] | None = None  # a lane's tree (None: its directory's files)


class Captain:
    """Every lane of this process."""

    def __init__(self, deps: CaptainDeps) -> None:
        self._s = deps.settings
        self.character = deps.settings.character_id
        self._clock = deps.clock
        self._provider = deps.provider
        self._browser = deps.browser
        self._tldraw = deps.tldraw
        self.paths = keys.CaptainPaths.under(deps.settings.state_dir)
        self.shutting_down = False
        self.registry = LaneRegistry(deps.settings, deps.clock, self.paths, deps.lane_store)
        self.redact = Redactor.of(deps.settings)  # the Anthropic key: never in a tool result or a text that leaves
        self.background = TaskSet("lane sends", BACKGROUND_MAX)  # the lanes' fire-and-forget sends, held until done
        self._kit = LaneKit(
            settings=deps.settings,
            clock=deps.clock,
            provider=deps.provider,
            paths=self.paths,
            tools=self._tools,
            drop=self.registry.drop,
            joins=deps.joins,
            shutting_down=lambda: self.shutting_down,
            background=self.background,
            redact=self.redact,
            config=AgentConfig.from_settings(deps.settings),
            governor=deps.governor,
            spending=deps.spending,
            routes=deps.routes,
        )
        self._open = functools.partial(LaneShell, self._kit)  # (plan, key, room, session) -> a new lane's shell
        self._images = ImageFetcher(
            self.paths.inbound, FetchPolicy.for_api_base(deps.settings.discord_api_base), deps.clock,
            retain_seconds=deps.settings.inbound_image_retention_seconds,
        )
        self._admission = Admission(guild_ids=deps.settings.discord_guild_ids, channel_ids=deps.settings.discord_channel_ids)
        self.claims_ignored = 0  # turns whose wire flags claimed authority the settings do not grant

    @property
    def model(self) -> str:
        """The model its turns ask (the demo model in demo mode; the configured one without a provider)."""
        return self._provider.model if self._provider is not None else self._s.model

    @property
    def lanes(self) -> OrderedDict[str, LaneShell]:
        return self.registry.lanes

    @property
    def zombies(self) -> dict[str, LaneShell]:
        """Dropped lanes whose aborted run outlived TEARDOWN_GRACE, by run id."""
        return self.registry.zombies

    async def submit(self, submit: TurnSubmit, delivery: DeliveryContext) -> TurnResult:
        """Run (or attach) one turn and return how it ended; never raises for model trouble."""
        room, trigger = submit.room, submit.trigger
        if self.shutting_down:
            return TurnResult.failed(SHUTDOWN_CODE)
        try:
            LaneLog(self.paths.lane_log(room), room, self._clock).heard(prompt.heard(trigger))
        except OSError as exc:  # a full disk is a state, not a stack trace: one line, and the turn fails with its code
            code = disk_failure(exc)
            if code is None:
                raise
            log.error("delivery %s not run: its lane log line was refused (%s: %s)", submit.delivery_id, code, exc.strerror)
            return TurnResult.failed(code)
        if self._provider is None:
            return TurnResult.failed(UNCONFIGURED)
        # fetched before the lane decision (it awaits), so a steered message carries its pictures too; a
        # catch-up's backlog pictures were said to him now, so they are fetched as well (cold history's are not)
        images = await self._images.fetch_turn(trigger.attachments, submit.backlog)
        self._note_claims(submit)
        plan = self.registry.plan(room, trigger.author)
        key = f"{plan.key}#{submit.delivery_id}" if plan.kind == "oneshot" else plan.key
        await self.registry.settled(key)
        # -- from here to the decision: no await, so the idle check and the run start are one step
        if self._stopping():  # aclose began while we awaited: open no lane it would not close
            return TurnResult.failed(SHUTDOWN_CODE)
        lane = self.registry.lane(plan, key, room, self._open)
        future: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()
        turn = NewTurn(delivery=delivery, trigger=trigger, backlog=submit.backlog, future=future, images=images)
        lane.feed(TurnArrived(submit.delivery_id, uuid.uuid4().hex[:12]), turn)
        return await asyncio.shield(future)

    def _note_claims(self, submit: TurnSubmit) -> None:
        """Log and count a turn whose wire flags claim what the settings do not grant (the flags are never read)."""
        author, room = submit.trigger.author, submit.room
        actor = author.is_system_actor and author.id not in self._s.discord_system_actor_ids
        trusted = room.trusted and not keys.is_trusted(room, self._s.discord_trusted_rooms)
        if actor or trusted:
            self.claims_ignored += 1
            log.warning("delivery %s: the wire claims %s the settings do not grant; ignored (%d so far)",
                        submit.delivery_id, "a system actor" if actor else "a trusted room", self.claims_ignored)

    def _stopping(self) -> bool:
        return self.shutting_down

    def _tools(self, capture: TurnCapture, plan: LanePlan) -> list[Tool]:
        root = self._s.attachment_root
        tools = [text_update_tool(capture, self._admission, self.redact)]
        if self._browser is not None and not plan.contained:  # a page is untrusted text: never beside a shell outside a trusted room
            tools.append(screenshot_tool(self._browser, capture, root))
        if self._tldraw is not None:
            tools.append(diagram_tool("draw_er_diagram", self._tldraw, capture, root))
            tools.append(diagram_tool("draw_sequence_diagram", self._tldraw, capture, root))
        if plan.privileged:
            tools.append(shell_tool(self._s.state_dir))
        return [redacted(tool, self.redact) for tool in tools]

    # ------------------------------------------------------------------ operator surface

    def abort(self, key: str, run_id: str | None, reason: str) -> bool:
        """Abort ``key``'s live run (only if it is ``run_id``, when named); whether the lane's machine aborted one."""
        lane = self.lanes.get(key)
        if lane is None:
            return False
        actions = lane.feed(AbortRequested("stalled" if reason == "stalled" else "operator", run_id))
        return any(isinstance(action, AbortAgent) for action in actions)

    async def abort_confirmed(self, key: str, run_id: str | None, reason: str, wait: float) -> bool:
        """:meth:`abort`, answered True only once the run has really ended (waiting up to ``wait`` s).

        A run that will not stop is reported unconfirmed (and keeps appearing in
        :meth:`runs`), so the supervisor escalates by restarting the service.
        """
        lane = self.lanes.get(key)
        aborted = lane.run_id if lane is not None else None
        if lane is None or not self.abort(key, run_id, reason):
            return False
        task = lane.owner_task
        ended = task is None or await ended_within(self._clock, task, wait)
        if not ended:
            log.warning("lane %s: run %s did not stop within %gs of its abort", key, aborted, wait)
        return ended

    def runs(self) -> tuple[RunReport, ...]:
        return reports.runs(self.registry, self._clock.boottime())

    def lane_directories(self) -> dict[str, Path]:
        return reports.lane_directories(self.registry)

    def lane_infos(self) -> tuple[LaneInfo, ...]:
        """The live lanes, most recently used first (no disk read)."""
        return tuple(reports.live_infos(self.registry, self._clock.boottime(), self._s.lanes_list_max))

    async def lane_listing(self, hash_prefix: str | None = None) -> tuple[LaneInfo, ...]:
        """Every lane for ``lanes``: the live ones, then those only on disk, scanned in a worker thread
        (ten thousand lane directories never stall the loop); at most ``CLANKIE_LANES_LIST_MAX``.

        With ``hash_prefix``, only the lanes whose hash (journald's ``LANE=``, traces' conversation id) starts
        with it, found among every lane, live or on disk, not only the first ``CLANKIE_LANES_LIST_MAX``.
        """
        limit = self._s.lanes_list_max
        live_keys = tuple(self.registry.lanes)
        if hash_prefix is not None:
            every = reports.live_infos(self.registry, self._clock.boottime(), len(live_keys))
            live = [info for info in every if lane_hash(info.key).startswith(hash_prefix)][:limit]
            on_disk = await asyncio.to_thread(listing.disk_lanes_by_hash, self.registry.paths, live_keys, hash_prefix,
                                              limit - len(live))
            return (*live, *reports.disk_infos(on_disk, self.registry, self._clock.wall()))
        live = reports.live_infos(self.registry, self._clock.boottime(), limit)
        on_disk = await asyncio.to_thread(listing.disk_lanes, self.registry.paths, live_keys, limit - len(live))
        return (*live, *reports.disk_infos(on_disk, self.registry, self._clock.wall()))

    def lane_counts(self) -> dict[str, int]:
        return reports.counts(self.registry)

    def room_of(self, key: str) -> Room | None:
        """The room of the live lane ``key``; None when it is not live."""
        lane = self.registry.lanes.get(key)
        return lane.room if lane is not None else None

    def drop_poison(self, room: Room, author: Author, message_ids: Sequence[str], delivery_id: str) -> None:
        """Take a poison delivery's messages out of its room for good (:func:`service.captain.lanes.dropped.drop`)."""
        dropped.drop(self.registry, room, author, message_ids, delivery_id)

    def stop_serving(self, lost: Callable[[Room], bool]) -> int:
        """This tree no longer holds the shard of the rooms ``lost`` names (the PostgreSQL profile's lease): each of
        their lanes is fed :class:`ShutDown`, so its machine aborts a live run and drops it; the room's next message
        reopens its lane from the store, with whatever another holder wrote meanwhile. Returns how many were fed."""
        fed = 0
        for lane in list(self.lanes.values()):
            if lane.plan.room is not None and lost(lane.plan.room):
                lane.feed(ShutDown("moved"))  # its turns fail captain_shard_moved: no sign in the room, no retry here
                fed += 1
        return fed

    async def aclose(self) -> None:
        """Abort every live run and close every session tree.

        Runs cut here end with :data:`SHUTDOWN_CODE`, not a failure: their
        deliveries are left for the restarted service to run again.
        """
        self.shutting_down = True
        for lane in list(self.lanes.values()):
            lane.feed(ShutDown())  # its machine aborts a live run and drops the lane
        await self.registry.wait_closed()
        await self.background.aclose()
        await self._images.aclose()
