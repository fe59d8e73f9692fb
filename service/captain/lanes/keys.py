"""Lane keys, target ids and where each lane keeps its files (pure).

A text room's durable lane is keyed ``discord:<character>:discord:<guild|dm>:<channel>``;
its session tree lives under ``<state>/captain/rooms/<quoted key>/``. A system
actor in a trusted room gets ``discord-system:<character>:discord:<guild|dm>:<channel>:<actor>``
under ``system/``; a privileged one-shot writes one tree per turn under
``turns/<lane>~<quoted target>/``; the lane log is ``lanes/<lane>~<quoted target>.jsonl``, the
room's dropped messages ``dropped/<lane>~<quoted target>.json``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from clankie.protocol import Room

LANE_NAME = "discord_presence"
_BARE_NAME = re.compile(r"[A-Za-z0-9_-]+")


def quoted(value: str) -> str:
    """``encodeURIComponent``-style quoting: one safe path segment (``:`` becomes ``%3A``)."""
    return quote(value, safe="-_.!~*'()")


def presence_id(room: Room) -> str:
    return f"discord:{room.guild_id or 'dm'}:{room.channel_id}"


def target_id(room: Room) -> str:
    return f"{room.guild_id or 'dm'}:{room.channel_id}"


def room_lane_key(character: str, room: Room) -> str:
    return f"discord:{character}:{presence_id(room)}"


def system_lane_key(character: str, room: Room, actor_id: str) -> str:
    return f"discord-system:{character}:{presence_id(room)}:{actor_id}"


def lane_file_key(room: Room) -> str:
    """``<lane>~<quoted target>``: the lane log's and one-shot trees' name."""
    return f"{LANE_NAME}~{quoted(target_id(room))}"


@dataclass(frozen=True, slots=True)
class LanePlan:
    """Which lane a turn runs in (:meth:`service.captain.lanes.registry.LaneRegistry.plan`): its kind, key and directory."""

    kind: str  # "room" | "system" | "oneshot"
    key: str
    directory: Path
    privileged: bool
    room: Room | None = None  # whose messages the lane answers (its shard fences the lane's writes in PostgreSQL)

    @property
    def contained(self) -> bool:
        """A privileged one-shot (a system actor outside a trusted room): the shell, so it reads nothing
        untrusted: no room history, no catch-up backlog, no browser; only the actor's own trigger."""
        return self.privileged and self.kind == "oneshot"


@dataclass(frozen=True, slots=True)
class CaptainPaths:
    """Every directory the captain writes, under ``<state>/captain``."""

    root: Path

    @classmethod
    def under(cls, state_dir: Path) -> CaptainPaths:
        return cls(state_dir / "captain")

    def room(self, lane_key: str) -> Path:
        return self.root / "rooms" / quoted(lane_key)

    def system(self, lane_key: str) -> Path:
        return self.root / "system" / quoted(lane_key)

    def turns(self, room: Room) -> Path:
        return self.root / "turns" / lane_file_key(room)

    def lane_log(self, room: Room) -> Path:
        return self.root / "lanes" / f"{lane_file_key(room)}.jsonl"

    def dropped(self, room: Room) -> Path:
        """The room's dropped (poison) message ids: never read back into a lane (:mod:`.dropped`)."""
        return self.root / "dropped" / f"{lane_file_key(room)}.json"

    @property
    def deliveries(self) -> Path:
        return self.root / "deliveries"

    @property
    def evidence(self) -> Path:
        return self.root / "evidence.jsonl"

    @property
    def inbound(self) -> Path:
        return self.root / "inbound"


def is_trusted(room: Room, trusted: tuple[str, ...]) -> bool:
    """Whether ``room`` is on the explicit trusted list (``<guild>/<channel>``, ``<guild>:<channel>``,
    ``dm/<channel>`` or a bare channel id). The wire's ``Room.trusted`` is not read: the list is the authority."""
    scope = room.guild_id or "dm"
    names = {f"{scope}/{room.channel_id}", f"{scope}:{room.channel_id}", room.channel_id}
    return any(entry in names for entry in trusted)


def parse_room(spec: str, character: str) -> Room:
    """An operator's room: a lane key, ``<guild>/<channel>``, ``dm/<channel>``, ``local:<name>`` or a bare name.

    A bare name (letters, digits, ``-``, ``_``; no ``/`` or ``:``) means ``local:<name>``, so
    ``clankiectl say lobby hi`` talks in ``local:lobby``. Raises ``ValueError`` with a clear message for anything else.
    """
    spec = spec.strip()
    prefix = f"discord:{character}:discord:"
    if spec.startswith(prefix):
        parts = spec[len(prefix) :].split(":")
        if len(parts) == 2 and all(parts):
            return _room(parts[0], parts[1])
    elif spec.startswith("local:") and len(spec) > len("local:"):
        return _room("local", spec[len("local:") :])
    elif "/" in spec:
        scope, _, channel = spec.partition("/")
        if scope and channel and "/" not in channel:
            return _room(scope, channel)
    elif _BARE_NAME.fullmatch(spec):
        return _room("local", spec)
    raise ValueError(
        f"room {spec[:80]!r} is not a lane key, <guild_id>/<channel_id>, dm/<channel_id>, local:<name> or a bare name"
    )


def _room(scope: str, channel: str) -> Room:
    if len(channel) > 32 or len(scope) > 32:
        raise ValueError("room ids are at most 32 characters")
    return Room(guild_id=None if scope == "dm" else scope, channel_id=channel)
