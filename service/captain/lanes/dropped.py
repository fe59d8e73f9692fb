"""A poison message leaves its room for good: its lane gets a note instead of its words, and no lane reads it back.

A delivery judged poison (:mod:`service.captain.deliveries.store`) was part of
``CLANKIE_POISON_RUNS`` runs the service crashed in. Its words are already off
its lane's session: each of those runs never ended, and a lane opened from disk
cuts such a run's messages off its branch
(:meth:`~service.agent.session.SessionTree.drop_unfinished`). Two ways back
remain, and both are closed here:

* **the lane**: the verdict appends a :data:`NOTE` to the room's lane (live, or
  its latest tree on disk) saying a message was dropped unanswered, so the
  model knows something was said that it will never see;
* **the room's history**: a cold lane's first run reads the room's recent
  messages from the bridge (Discord still has the poison message), so the
  room's dropped message ids are kept in ``<state>/captain/dropped/<room>.json``
  and taken out of every history reply (:func:`without`).

The id file keeps the newest :data:`KEPT` ids: a history read returns at most
50 messages before the trigger, and a dropped message with 50 dropped ones
after it has at least 50 messages after it, so it can never be in one. The
file is small and rewritten whole (temporary file, fsync, rename); a verdict
whose file cannot be written is logged, and the poison message is still
failed.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Protocol

from clankie.disksync import sync_dir_later
from clankie.jsonl import replace_file
from clankie.paths import make_private_dirs
from clankie.protocol import Author, HistoryMessage, Room
from service.captain.lanes.keys import CaptainPaths, LanePlan

log = logging.getLogger(__name__)

KEPT = 64
NOTE = (
    "[service note] A message in this room was dropped without an answer: every attempt to answer it "
    "stopped the service, so it was never shown to you. If someone asks about it, say so."
)


class Lanes(Protocol):
    """What :func:`drop` needs of the lanes (the captain's :class:`~service.captain.lanes.registry.LaneRegistry`)."""

    @property
    def paths(self) -> CaptainPaths: ...

    def plan(self, room: Room, author: Author) -> LanePlan: ...

    def note(self, plan: LanePlan, text: str) -> bool: ...


def without(messages: Sequence[HistoryMessage], dropped: Collection[str]) -> tuple[HistoryMessage, ...]:
    """``messages`` less the dropped ones, in order (pure)."""
    return tuple(m for m in messages if m.id not in dropped)


def dropped_ids(paths: CaptainPaths, room: Room) -> frozenset[str]:
    """The room's dropped message ids; none when nothing was dropped (or the file cannot be read: logged)."""
    return frozenset(_read(paths.dropped(room)))


def remember(paths: CaptainPaths, room: Room, message_ids: Sequence[str]) -> None:
    """Add ``message_ids`` to the room's dropped ids (the newest :data:`KEPT` are kept); raises OSError."""
    path = paths.dropped(room)
    old = [i for i in _read(path) if i not in message_ids]
    kept = [*old, *message_ids][-KEPT:]
    make_private_dirs(path.parent)
    replace_file(path, json.dumps({"message_ids": kept}).encode("utf-8"))
    with contextlib.suppress(OSError):
        sync_dir_later(path.parent)


def _read(path: Path) -> list[str]:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("dropped messages %s unreadable (%s); history is not filtered by them", path.name, type(exc).__name__)
        return []
    ids = data.get("message_ids") if isinstance(data, dict) else None
    return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []


def drop(registry: Lanes, room: Room, author: Author, message_ids: Sequence[str], delivery_id: str) -> None:
    """Take a poison delivery's messages out of its room: remember their ids, and note the drop in its lane.

    Synchronous (no await), so no run of the room can start between the two.
    A failure of either is logged and the other still happens.
    """
    try:
        remember(registry.paths, room, message_ids)
    except OSError as exc:
        log.error("delivery %s: dropped message ids not recorded (%s); a cold lane may read it back",
                  delivery_id, exc.strerror or type(exc).__name__)
    plan = registry.plan(room, author)
    if plan.kind == "oneshot":  # no lasting session: nothing carries it
        return
    try:
        noted = registry.note(plan, NOTE)
    except OSError as exc:
        log.error("delivery %s: drop not noted in lane %s (%s)", delivery_id, plan.key, exc.strerror or type(exc).__name__)
        return
    if not noted:
        log.warning("delivery %s: lane %s is being torn down; drop not noted", delivery_id, plan.key)
