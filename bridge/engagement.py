"""Engagement state for any number of rooms, bounded by age and count (pure; ``now`` is passed in).

A room is *tracked* once he has answered in it (docs/bridge.md, "Engagement
and catch-up"); :class:`Rooms` holds the state of every tracked room, least
recently active first. A room is active when a message of it is admitted, a
turn of it settles, or a buffered message of it is restored after a restart.

Two bounds, both settings of the bridge, and neither silent (each eviction is
counted in ``evicted``, which the heartbeat reports as ``engagement_evicted``):

- **age**: a room with no activity for ``idle_s`` seconds
  (``CLANKIE_DISCORD_ENGAGEMENT_IDLE_SECONDS``) is forgotten, and reads as
  never answered in (``UNTRACKED``) until he answers there again;
- **count**: past ``max_rooms`` (``CLANKIE_DISCORD_ENGAGEMENT_MAX_ROOMS``) the
  least recently active room is forgotten.

Each room's catch-up backlog is kept here too (:meth:`Rooms.buffer`, bounded
by the caller's cap, returning what falls out; :meth:`Rooms.take`), with a
count of everything buffered. The bridge keeps message ids in it: a buffered
message's one record is its journal entry.

A room holding buffered messages is never forgotten: the catch-up timer
empties every backlog within ``CLANKIE_DISCORD_CATCH_UP_SECONDS``, and the
room may go after that. So nothing buffered is lost, and the count can pass
``max_rooms`` only by rooms waiting for their catch-up turn. Within both
bounds a room behaves exactly as it would with no bound at all.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Generic, TypeVar

DEFAULT_IDLE_S = 3600.0
DEFAULT_MAX_ROOMS = 10_000

T = TypeVar("T")


class Engagement(enum.Enum):
    UNTRACKED = "untracked"  # never answered here (or forgotten after the bound)
    ENGAGED = "engaged"  # answered recently: read everything live
    DRIFTED = "drifted"  # `window` messages without an answer: buffer chatter


class RoomEvent(enum.Enum):
    HEARD = "heard"  # an admitted message was read live
    ANSWERED = "answered"  # settled or absorbed
    DECLINED = "declined"  # silent or failed


# Where each event may lead from each state (the counter decides ENGAGED vs DRIFTED).
TRANSITIONS: dict[Engagement, dict[RoomEvent, frozenset[Engagement]]] = {
    Engagement.UNTRACKED: {
        RoomEvent.HEARD: frozenset({Engagement.UNTRACKED}),
        RoomEvent.ANSWERED: frozenset({Engagement.ENGAGED}),
        RoomEvent.DECLINED: frozenset({Engagement.UNTRACKED}),
    },
    Engagement.ENGAGED: {
        RoomEvent.HEARD: frozenset({Engagement.ENGAGED, Engagement.DRIFTED}),
        RoomEvent.ANSWERED: frozenset({Engagement.ENGAGED}),
        RoomEvent.DECLINED: frozenset({Engagement.ENGAGED, Engagement.DRIFTED}),
    },
    Engagement.DRIFTED: {
        RoomEvent.HEARD: frozenset({Engagement.DRIFTED}),
        RoomEvent.ANSWERED: frozenset({Engagement.ENGAGED}),
        RoomEvent.DECLINED: frozenset({Engagement.DRIFTED}),
    },
}


@dataclass(slots=True)
class Room(Generic[T]):
    """One tracked room: messages since his last answer, its backlog (what the bridge buffers: message ids), and when
    it was last active."""

    active_at: float
    since_reply: int = 0
    tracked: bool = False
    backlog: list[T] = field(default_factory=list)

    def state(self, window: int) -> Engagement:
        if not self.tracked:
            return Engagement.UNTRACKED
        return Engagement.ENGAGED if self.since_reply < window else Engagement.DRIFTED


class Rooms(Generic[T]):
    """Every tracked room by channel id, least recently active first, bounded by ``idle_s`` and ``max_rooms``."""

    def __init__(self, idle_s: float = DEFAULT_IDLE_S, max_rooms: int = DEFAULT_MAX_ROOMS) -> None:
        if idle_s <= 0 or max_rooms < 1:
            raise ValueError("engagement needs idle_s > 0 and max_rooms >= 1")
        self.idle_s = idle_s
        self.max_rooms = max_rooms
        self._rooms: OrderedDict[str, Room[T]] = OrderedDict()
        self.evicted = 0  # rooms forgotten at either bound, since start
        self.buffered = 0  # items in all the backlogs together

    def __len__(self) -> int:
        return len(self._rooms)

    def buffer(self, room: Room[T], item: T, cap: int) -> tuple[T, ...]:
        """Append ``item`` to the room's backlog; past ``cap`` the oldest fall out, and are returned."""
        room.backlog.append(item)
        self.buffered += 1
        over = len(room.backlog) - cap
        if over <= 0:
            return ()
        fell_out = tuple(room.backlog[:over])
        del room.backlog[:over]
        self.buffered -= over
        return fell_out

    def take(self, room: Room[T]) -> tuple[T, ...]:
        """Empty the room's backlog; returns what it held, oldest first."""
        taken = tuple(room.backlog)
        room.backlog.clear()
        self.buffered -= len(taken)
        return taken

    def take_all(self) -> list[tuple[str, tuple[T, ...]]]:
        """Every non-empty backlog, emptied, with its channel id (least recently active room first)."""
        return [(cid, self.take(room)) for cid, room in list(self._rooms.items()) if room.backlog]

    def peek(self, channel_id: str) -> Room[T] | None:
        """The room's state as held (a read: activity is not moved; call :meth:`expire` first for the bounds)."""
        return self._rooms.get(channel_id)

    def touch(self, channel_id: str, now: float, *, create: bool = False) -> Room[T] | None:
        """Mark the room active at ``now`` (creating it if ``create``), after forgetting what is past the bounds."""
        self.expire(now)
        room = self._rooms.get(channel_id)
        if room is None:
            if not create:
                return None
            room = self._rooms[channel_id] = Room(active_at=now)
            self._bound_count(keep=channel_id)
        else:
            self._rooms.move_to_end(channel_id)
        room.active_at = max(room.active_at, now)
        return room

    def expire(self, now: float) -> int:
        """Forget the rooms idle for ``idle_s`` (they are at the front); a room with a backlog stays. Returns how many."""
        victims: list[str] = []
        for channel_id, room in self._rooms.items():
            if not self._idle(room, now):
                break
            if not room.backlog:
                victims.append(channel_id)
        for channel_id in victims:
            del self._rooms[channel_id]
        self.evicted += len(victims)
        return len(victims)

    def _bound_count(self, keep: str) -> None:
        excess = len(self._rooms) - self.max_rooms
        if excess <= 0:
            return
        victims: list[str] = []
        for channel_id, room in self._rooms.items():  # least recently active first; stops as soon as it has enough
            if len(victims) == excess:
                break
            if channel_id != keep and not room.backlog:
                victims.append(channel_id)
        for channel_id in victims:
            del self._rooms[channel_id]
        self.evicted += len(victims)

    def _idle(self, room: Room[T], now: float) -> bool:
        return now - room.active_at >= self.idle_s
