"""Which lanes are live in memory: opening, dropping, tearing down, and the LRU bound on idle ones.

A lane is opened on its room's first message and kept, least recently used
first, in :attr:`LaneRegistry.lanes`. At most ``lanes_max_live`` lanes stay
live: opening one more first evicts the least recently used *idle* lanes (no
run, no turn waiting, no owner task). Eviction closes the lane's session file
and forgets its objects; the lane's next message reopens the latest tree from
disk. A lane that was warm when evicted comes back warm: eviction writes a
:data:`WARM_STAMP` file in the lane's directory holding this process's
instance id, and reopening consumes it (a stamp from another process, or none,
means cold, so lanes still come back cold after a restart). If every live
lane is busy, the bound is exceeded until some become idle: a message is
never refused because of it.

A lane opened from disk first cuts the messages of a run that never ended
(its process died during it) off its tree
(:meth:`~service.agent.session.SessionTree.drop_unfinished`): re-submitted,
they are run again; judged poison, they are gone.

A dropped lane (a stalled abort) is forgotten entirely and comes back cold.
A dropped lane whose aborted run outlives :data:`TEARDOWN_GRACE` is a
*zombie*: its tree may still be written, so the room's next lane starts a
fresh tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from clankie.clock import Clock
from clankie.protocol import Author, Room
from clankie.settings import Settings
from clankie.store.lane_ports import LaneTreeStore
from service.agent.agent import AgentConfig
from service.agent.session import SessionTree
from service.agent.transcript import CONTEXT_NOTE
from service.captain.lanes import keys
from service.captain.lanes.keys import LanePlan
from service.captain.lanes.live import ended_within

if TYPE_CHECKING:  # the shell's kit is handed this registry's drop
    from service.captain.lanes.shell import LaneShell

log = logging.getLogger(__name__)

TEARDOWN_GRACE = 10.0
WARM_STAMP = ".warm"  # in an evicted warm lane's directory: the instance id of the process that evicted it

Build = Callable[[LanePlan, str, Room, SessionTree], "LaneShell"]


class LaneRegistry:
    """Every live lane of this process, least recently used first."""

    def __init__(self, settings: Settings, clock: Clock, paths: keys.CaptainPaths,
                 store: Callable[[LanePlan], Path | LaneTreeStore] | None = None) -> None:
        self._s = settings
        self._clock = clock
        self.paths = paths
        self._store = store or (lambda plan: plan.directory)  # where a lane's tree is kept (service.captain.stores)
        self.max_live = settings.lanes_max_live
        self._retention = AgentConfig.from_settings(settings).retention  # how long old session files are kept
        self.lanes: OrderedDict[str, LaneShell] = OrderedDict()
        self.closing: dict[str, asyncio.Task[None]] = {}
        self.zombies: dict[str, LaneShell] = {}  # by run id
        self.instance = uuid.uuid4().hex  # names this process in warm stamps
        self.evicted = 0

    def plan(self, room: Room, author: Author) -> LanePlan:
        """Which lane a turn runs in. Authority comes from this process's settings alone: the wire's
        ``Author.is_system_actor`` and ``Room.trusted`` are never read (any peer could have set them)."""
        system = author.id in self._s.discord_system_actor_ids
        room_key = keys.room_lane_key(self._s.character_id, room)
        if system and keys.is_trusted(room, self._s.discord_trusted_rooms):
            key = keys.system_lane_key(self._s.character_id, room, author.id)
            return LanePlan("system", key, self.paths.system(key), True, room)
        if system or not self._s.captain_durable:
            return LanePlan("oneshot", room_key, self.paths.turns(room), system, room)
        return LanePlan("room", room_key, self.paths.room(room_key), False, room)

    async def settled(self, key: str) -> None:
        """Wait until no teardown of ``key`` is under way."""
        while key in self.closing:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.closing[key])

    def lane(self, plan: LanePlan, key: str, room: Room, build: Build) -> LaneShell:
        """The live lane for ``key`` (now the most recently used), opened if it is not live (no await)."""
        lane = self.lanes.get(key)
        if lane is not None:
            self.lanes.move_to_end(key)
            return lane
        self._make_room()
        if plan.kind == "oneshot":
            session = SessionTree.create(self._store(plan), self._clock, self._retention)
        elif any(z.key == key for z in self.zombies.values()):
            log.warning("lane %s: an aborted run may still write its tree; starting a fresh tree", key)
            session = SessionTree.create(self._store(plan), self._clock, self._retention)
        else:
            session = self._resume(plan)
        lane = build(plan, key, room, session)
        lane.fresh = not self._take_warm_stamp(plan) if plan.kind != "oneshot" else True
        self.lanes[key] = lane
        log.info("lane %s opened (%s, %s, session %s)", key, plan.kind, "cold" if lane.fresh else "warm", session.session_id[:8])
        return lane

    def _resume(self, plan: LanePlan) -> SessionTree:
        """The lane's latest tree, less the messages of a run that never ended (its process died)."""
        session = SessionTree.open_latest(self._store(plan), self._clock, self._retention)
        try:
            session.drop_unfinished()
        except OSError as exc:  # the branch is cut in memory; the dead lines stay on disk until the next append
            log.warning("lane %s: cut of an unfinished run not written (%s)", plan.key, exc.strerror or type(exc).__name__)
        return session

    def note(self, plan: LanePlan, text: str) -> bool:
        """Append a note the model will see to ``plan``'s lane: its live tree, else its latest one on disk.

        False (nothing written) while the lane is being torn down or an aborted
        run may still write its tree. Raises OSError if the disk refuses it.
        """
        lane = self.lanes.get(plan.key)
        if lane is not None:
            lane.agent.session.append_custom(CONTEXT_NOTE, {"text": text})
            return True
        if plan.key in self.closing or any(z.key == plan.key for z in self.zombies.values()):
            return False
        session = self._resume(plan)
        try:
            session.append_custom(CONTEXT_NOTE, {"text": text})
        finally:
            session.close()
        return True

    def _make_room(self) -> None:
        """Evict least recently used idle lanes until one more fits; busy lanes are never evicted."""
        while len(self.lanes) >= self.max_live:
            victim = next((lane for lane in self.lanes.values() if lane.plan.kind != "oneshot" and lane.evictable()), None)
            if victim is None:
                log.info("all %d live lanes are busy; exceeding lanes_max_live=%d for now", len(self.lanes), self.max_live)
                return
            self._evict(victim)

    def _evict(self, lane: LaneShell) -> None:
        del self.lanes[lane.key]
        if not lane.fresh:
            self._stamp_warm(lane.plan)
        self.close_lane(lane)
        self.evicted += 1
        log.info("lane %s evicted (idle, least recently used)", lane.key)

    def _stamp_warm(self, plan: LanePlan) -> None:
        try:
            (plan.directory / WARM_STAMP).write_text(self.instance)
        except OSError as exc:  # the lane comes back cold: it reads the room again, nothing is lost
            log.warning("lane %s: warm stamp not written (%s); it will come back cold", plan.key, type(exc).__name__)

    def _take_warm_stamp(self, plan: LanePlan) -> bool:
        """Whether this process evicted the lane warm (the stamp is consumed either way)."""
        stamp = plan.directory / WARM_STAMP
        try:
            warm = stamp.read_text() == self.instance
            stamp.unlink()
        except OSError:
            return False
        return warm

    def drop(self, lane: LaneShell) -> None:
        """Forget ``lane`` (its next message rebuilds it cold) and tear it down in the background."""
        if self.lanes.get(lane.key) is lane:
            del self.lanes[lane.key]
        key = lane.key
        if key not in self.closing:
            task = asyncio.create_task(self._teardown(lane, lane.run_id), name=f"lane-teardown-{key}")
            self.closing[key] = task
            task.add_done_callback(lambda _t: self.closing.pop(key, None))
        log.info("lane %s dropped", lane.key)

    async def _teardown(self, lane: LaneShell, run_id: str | None) -> None:
        """Close ``lane`` once its run (``run_id``, named when it was dropped) has ended."""
        task = lane.owner_task
        if task is not None and task is not asyncio.current_task() and not await ended_within(self._clock, task, TEARDOWN_GRACE):
            # the run ignores its abort: never close (or share) a tree it may still write
            log.warning(
                "lane %s: aborted run %s still running after %gs; next turn gets a fresh tree", lane.key, run_id, TEARDOWN_GRACE
            )
            zombie = run_id or ""  # a live lane always names its run; an idle one's task is ending on its own
            self.zombies[zombie] = lane
            task.add_done_callback(lambda _t: self._bury(zombie, lane))
            return
        self.close_lane(lane)

    def _bury(self, run_id: str, lane: LaneShell) -> None:
        if self.zombies.pop(run_id, None) is not None:
            log.warning("lane %s: aborted run %s finally ended", lane.key, run_id)
        self.close_lane(lane)

    @staticmethod
    def close_lane(lane: LaneShell) -> None:
        lane.close()

    async def wait_closed(self) -> None:
        if self.closing:
            await asyncio.gather(*self.closing.values(), return_exceptions=True)
