"""Durable session trees: one lane's conversation, append-only, kept behind a store, bounded in memory.

A tree is a chain of segments in a :class:`~clankie.store.lane_ports.LaneTreeStore`: the files of a lane's
directory (:class:`~service.agent.tree_files.FileLaneTree`, the default profile) or rows in PostgreSQL
(:mod:`clankie.store.lanes_pg`). A segment's first record is a header (``type: "session"``, ``previous``: the
segment this one continues, ``model``: the model in use when it started); every later record is an entry with
``id``, ``parent_id``, ``type`` and an ISO ``timestamp``. Entry types:

``message``       a conversation message (``message``), assistant ones with ``usage``/``stop_reason``
``model_change``  the model used from here on (``model``)
``compaction``    ``summary``, ``first_kept_id``, ``tokens_before``
``custom``        runtime records (``custom_type``, ``data``): run ends, provider errors, cuts;
                  a ``context_note`` (``data.text``) is a line the model sees (:mod:`.transcript`)

**Memory.** A tree holds only the branch its next request needs: the entries
from the last compaction's first kept entry to the leaf, plus its header and
the current model. Older entries are in the store only.

**Continuation.** At a compaction (:meth:`SessionTree.continue_with`) a new
segment is started: header naming the old one, the kept tail copied (without
``usage``, so spend is counted once), then the compaction entry, written all
or nothing. Old segments are pruned by the rule of :mod:`service.agent.retention`
(by age and by count: the lane's bound on its tree).

**Writing.** Each entry is one append to the store; :meth:`sync` asks the store to make them durable at turn
boundaries (the file adapter hands an fsync to the sync threads).

**A run that never ended** (its process died) is cut off the live branch
when the lane is next opened (:meth:`SessionTree.drop_unfinished`): the
branch continues from before its messages, in the same segment.

**Loading.** The store returns a segment's records (the file adapter cuts a torn last line and skips unreadable
ones, with warnings); entries without an id or type are skipped with a warning. A segment with no readable header
raises :class:`SessionCorrupt`; :meth:`SessionTree.open_latest` sets it aside (a file becomes ``.broken``) and
starts a new, empty tree (the lane starts cold).
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import uuid
from pathlib import Path
from typing import Any

from clankie.clock import Clock
from clankie.store.lane_ports import SEGMENT_SUFFIX, LaneTreeStore, TreeUnreadable
from service.agent.branch import SessionCorrupt, branch_of, live_branch, unfinished_tail
from service.agent.branch import last_model as _last_model
from service.agent.content import Message
from service.agent.retention import STAMP, Retention, choose, stamp_of
from service.agent.transcript import Entry, context_messages
from service.agent.tree_files import FileLaneTree

__all__ = ["SessionCorrupt", "SessionTree", "latest_session"]

log = logging.getLogger(__name__)

VERSION = 1


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="milliseconds")


def _store(where: Path | LaneTreeStore) -> LaneTreeStore:
    """A directory means today's files."""
    return FileLaneTree(where) if isinstance(where, Path) else where


class SessionTree:
    """One lane's current segment: the live branch in memory, entries appended to the store."""

    def __init__(
        self,
        store: LaneTreeStore,
        name: str,
        header: dict[str, Any],
        entries: list[Entry],
        clock: Clock,
        retention: Retention | None = None,
    ) -> None:
        self.store = store
        self.name = name
        self.header = header
        self._clock = clock
        self._retention = retention or Retention()
        self._model: str | None = _last_model(entries) or header.get("model")
        self._entries = live_branch(entries)
        self._by_id = {e["id"]: e for e in self._entries}
        self._leaf: str | None = entries[-1]["id"] if entries else None
        self._closed = False
        self._dirty = False  # entries written since the last sync was asked for

    # -- opening -------------------------------------------------------------

    @classmethod
    def create(cls, where: Path | LaneTreeStore, clock: Clock, retention: Retention | None = None) -> SessionTree:
        """Start a new, empty session tree in ``where`` (a directory: files), then prune the lane's old segments."""
        store = _store(where)
        name, header = _new_segment(store, clock.wall(), previous=None, model=None)
        store.create(name, header)
        log.info("created session %s", name)
        tree = cls(store, name, header, [], clock, retention)
        tree._dirty = True  # the header's sync goes with the first sync
        tree.prune()
        return tree

    @classmethod
    def open(cls, path: Path, clock: Clock, retention: Retention | None = None) -> SessionTree:
        """Load an existing session file, cutting off a torn last line (raises :class:`SessionCorrupt`)."""
        return cls._load(FileLaneTree(path.parent), path.name, clock, retention)

    @classmethod
    def _load(cls, store: LaneTreeStore, name: str, clock: Clock, retention: Retention | None) -> SessionTree:
        header, entries = branch_of(store.read(name), name)
        return cls(store, name, header, entries, clock, retention)

    @classmethod
    def open_latest(cls, where: Path | LaneTreeStore, clock: Clock, retention: Retention | None = None) -> SessionTree:
        """Resume the most recent session tree in ``where``, or create one.

        A segment without a readable header is set aside (a file is renamed
        ``<name>.broken``) and a new tree is started: the lane comes back cold instead of failing.
        """
        store = _store(where)
        latest = store.newest()
        if latest is None:
            return cls.create(store, clock, retention)
        try:
            tree = cls._load(store, latest, clock, retention)
        except TreeUnreadable as exc:  # SessionCorrupt is one
            broken = store.set_aside(latest)
            log.error("session %s is unreadable (%s): moved aside as %s; the lane starts cold", latest, exc, broken)
            return cls.create(store, clock, retention)
        tree.prune()
        return tree

    def close(self) -> None:
        """Ask for the last sync; the tree is read-only afterwards."""
        if not self._closed:
            self.sync()
            self._closed = True

    @property
    def path(self) -> Path:
        """The current segment's file (the file adapter only: raises TypeError for a tree kept elsewhere)."""
        if not isinstance(self.store, FileLaneTree):
            raise TypeError(f"session {self.name} is not kept in a file")
        return self.store.path(self.name)

    # -- reading -------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return str(self.header["id"])

    @property
    def previous(self) -> str | None:
        """The name of the file this one continues, if any."""
        previous = self.header.get("previous")
        return previous if isinstance(previous, str) else None

    @property
    def leaf_id(self) -> str | None:
        return self._leaf

    @property
    def entries(self) -> list[Entry]:
        """The entries held in memory (the live branch, oldest first; a copy of the list)."""
        return list(self._entries)

    def get(self, entry_id: str) -> Entry:
        return self._by_id[entry_id]

    def path_to_leaf(self) -> list[Entry]:
        """The live branch: from the last compaction's first kept entry (or the root) to the leaf."""
        return list(self._entries)

    def messages(self) -> list[Message]:
        """The conversation as the model should see it (compaction applied, pairing repaired)."""
        return context_messages(self._entries)

    def last_model(self) -> str | None:
        return self._model

    # -- appending -----------------------------------------------------------

    def append(self, entry_type: str, **fields: Any) -> Entry:
        """Append one entry as a child of the leaf; it becomes the new leaf."""
        if self._closed:
            raise ValueError("session tree is closed")
        entry = self._entry(entry_type, fields)
        self.store.append(self.name, entry)
        self._dirty = True
        self._adopt(entry)
        return entry

    def append_message(self, message: Message, **extra: Any) -> Entry:
        return self.append("message", message=message, **extra)

    def append_model_change(self, model: str) -> Entry:
        return self.append("model_change", model=model)

    def append_compaction(self, summary: str, first_kept_id: str, tokens_before: int) -> Entry:
        """A compaction entry in this file (see :meth:`continue_with` for a new file)."""
        return self.append(
            "compaction", summary=summary, first_kept_id=first_kept_id, tokens_before=tokens_before
        )

    def append_custom(self, custom_type: str, data: dict[str, Any]) -> Entry:
        return self.append("custom", custom_type=custom_type, data=data)

    def continue_with(self, **compaction: Any) -> Entry:
        """Record a compaction by starting a new file that continues this one; returns the entry.

        ``compaction`` holds the entry's fields (``summary``, ``first_kept_id``,
        ``tokens_before``, …). If the new file cannot be written, the entry is
        appended to this file instead (a warning), so the lane goes on.
        """
        if self._closed:
            raise ValueError("session tree is closed")
        entry = self._entry("compaction", compaction)
        first = next((i for i, e in enumerate(self._entries) if e["id"] == entry["first_kept_id"]), None)
        if first is None:
            raise ValueError("first_kept_id is not on the live branch")
        carried = [{k: v for k, v in e.items() if k != "usage"} for e in self._entries[first:]]
        name, header = _new_segment(self.store, self._clock.wall(), previous=self.name, model=self._model)
        try:
            self.store.write_whole(name, [header, *carried, entry])
        except OSError as exc:
            log.warning("session %s: cannot start a new file (%s); compacting in place", self.name, exc.strerror)
            return self.append("compaction", **compaction)
        self.sync()
        log.info("session %s continues %s (%d entries carried)", name, self.name, len(carried))
        self.name, self.header = name, header
        self._entries = carried
        self._by_id = {e["id"]: e for e in carried}
        self._dirty = False
        self._adopt(entry)
        self.prune()
        return entry

    def drop_unfinished(self) -> int:
        """Cut the messages of a run that never ended off the live branch; returns how many were cut.

        Called when a lane is opened from disk, so no run of this tree is live:
        messages after the last ``run_end`` are those of a run whose process
        died (:func:`~service.agent.branch.unfinished_tail`). The branch goes
        back to before them; what else that tail held (a model change, a
        compaction, a note) is appended again after that point, then a
        ``cut`` record, so the cut is on disk and the dead lines are off the
        path (``usage`` is not copied: spend is counted once). Their deliveries are run again if they are re-submitted, and a
        message judged poison never is: the lane no longer carries its words.
        """
        start = unfinished_tail(self._entries)
        if start is None:
            return 0
        tail = self._entries[start:]
        kept = [e for e in tail if e["type"] != "message"]
        self._entries = self._entries[:start]
        self._by_id = {e["id"]: e for e in self._entries}
        self._leaf = self._entries[-1]["id"] if self._entries else tail[0].get("parent_id")
        for entry in kept:
            self.append(entry["type"], **{k: v for k, v in entry.items() if k not in ("type", "id", "parent_id", "usage")})
        cut = len(tail) - len(kept)
        self.append_custom("cut", {"messages": cut})
        log.info("session %s: cut %d messages of a run that never ended", self.name, cut)
        return cut

    def sync(self) -> None:
        """Make every appended entry durable soon, off the event loop (called at turn boundaries)."""
        if not self._dirty:
            return
        self._dirty = False
        self.store.sync(self.name)

    def prune(self) -> list[str]:
        """Delete this lane's segments past the retention bounds (never the current one)."""
        doomed = choose(self.store.names(), self.name, self._clock.wall(), self._retention)
        return self.store.delete(doomed) if doomed else []

    def _entry(self, entry_type: str, fields: dict[str, Any]) -> Entry:
        return {
            "type": entry_type,
            "id": self._new_id(),
            "parent_id": self._leaf,
            "timestamp": _iso(self._clock.wall()),
            **fields,
        }

    def _adopt(self, entry: Entry) -> None:
        self._entries.append(entry)
        self._by_id[entry["id"]] = entry
        self._leaf = entry["id"]
        if entry["type"] == "model_change":
            self._model = str(entry["model"])
        elif entry["type"] == "compaction":
            kept = live_branch(self._entries)
            if len(kept) < len(self._entries):
                self._entries = kept
                self._by_id = {e["id"]: e for e in kept}

    def _new_id(self) -> str:
        while True:
            candidate = secrets.token_hex(4)
            if candidate not in self._by_id:
                return candidate


def latest_session(directory: Path) -> Path | None:
    """The newest session file in ``directory`` by its timestamped name, if any."""
    name = FileLaneTree(directory).newest()
    return None if name is None else directory / name


def _new_segment(store: LaneTreeStore, now: float, *, previous: str | None, model: str | None) -> tuple[str, dict[str, Any]]:
    """A fresh segment name that sorts after every segment of ``store``, and its header."""
    latest = store.newest()
    if latest is not None:
        stamp = stamp_of(latest)
        if stamp is not None:
            now = max(now, stamp + 1e-6)  # a clock that stood still or stepped back
    session_id = uuid.uuid4().hex
    name = dt.datetime.fromtimestamp(now, dt.UTC).strftime(STAMP)
    header: dict[str, Any] = {"type": "session", "version": VERSION, "id": session_id, "timestamp": _iso(now)}
    if previous is not None:
        header["previous"] = previous
    if model is not None:
        header["model"] = model
    return f"{name}_{session_id[:8]}{SEGMENT_SUFFIX}", header
