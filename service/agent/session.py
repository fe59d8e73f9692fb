"""Durable session trees: append-only JSONL files, one lane's conversation, bounded in memory.

Line 1 of a file is a header (``type: "session"``, ``previous``: the file this
one continues, ``model``: the model in use when it started); every later line
is an entry with ``id``, ``parent_id``, ``type`` and an ISO ``timestamp``.
Entry types:

``message``       a conversation message (``message``), assistant ones with ``usage``/``stop_reason``
``model_change``  the model used from here on (``model``)
``compaction``    ``summary``, ``first_kept_id``, ``tokens_before``
``custom``        runtime records (``custom_type``, ``data``): run ends, provider errors, cuts;
                  a ``context_note`` (``data.text``) is a line the model sees (:mod:`.transcript`)

**Memory.** A tree holds only the branch its next request needs: the entries
from the last compaction's first kept entry to the leaf, plus its header and
the current model. Older entries are on disk only.

**Continuation.** At a compaction (:meth:`SessionTree.continue_with`) a new
file is started: header naming the old one, the kept tail copied (without
``usage``, so spend is counted once), then the compaction entry. It is
written whole as ``<name>.partial``, fsynced and renamed, so a crash leaves
either the old file current or the new one complete. Old files are pruned by
:mod:`service.agent.retention`.

**Writing.** The file is not held open: each line is one open–append–close on
``O_APPEND`` (:func:`clankie.appender.append_once`: a short write is continued,
a failed one is cut back and raises ``OSError``); :meth:`sync` hands an fsync
to the sync threads (:func:`clankie.disksync.sync_path_later`) at turn boundaries. Open descriptors therefore do
not grow with the number of lanes.

**A run that never ended** (its process died) is cut off the live branch
when the lane is next opened (:meth:`SessionTree.drop_unfinished`): the
branch continues from before its messages, in the same file.

**Loading.** A torn last line (a crash mid-append) is cut off with a warning;
unreadable complete lines and lines that are not entries are skipped with a
warning. A file with no readable header raises :class:`SessionCorrupt`;
:meth:`SessionTree.open_latest` moves such a file aside as ``.broken`` and
starts a new, empty tree (the lane starts cold).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import secrets
import uuid
from pathlib import Path
from typing import Any

from clankie.appender import append_once
from clankie.clock import Clock
from clankie.disksync import sync_dir_later, sync_path_later
from clankie.jsonl import encode_line, write_all
from clankie.paths import make_private_dirs
from service.agent.branch import SessionCorrupt, live_branch, load, unfinished_tail
from service.agent.branch import last_model as _last_model
from service.agent.content import Message
from service.agent.retention import STAMP, Retention, prune, stamp_of
from service.agent.transcript import Entry, context_messages

__all__ = ["SessionCorrupt", "SessionTree", "latest_session"]

log = logging.getLogger(__name__)

VERSION = 1
SUFFIX = ".jsonl"


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="milliseconds")


class SessionTree:
    """One lane's current session file: the live branch in memory, lines appended to disk."""

    def __init__(
        self,
        path: Path,
        header: dict[str, Any],
        entries: list[Entry],
        clock: Clock,
        retention: Retention | None = None,
    ) -> None:
        self.path = path
        self.header = header
        self._clock = clock
        self._retention = retention or Retention()
        self._model: str | None = _last_model(entries) or header.get("model")
        self._entries = live_branch(entries)
        self._by_id = {e["id"]: e for e in self._entries}
        self._leaf: str | None = entries[-1]["id"] if entries else None
        self._closed = False
        self._dirty = False  # lines written since the last sync was handed off
        self._torn = False  # a failed write may have left half a line at the end of the file

    # -- opening -------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, clock: Clock, retention: Retention | None = None) -> SessionTree:
        """Start a new, empty session tree in ``directory`` (then prune the directory's old files)."""
        make_private_dirs(directory)
        path, header = _new_file(directory, clock.wall(), previous=None, model=None)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            write_all(fd, encode_line(header))
        finally:
            os.close(fd)
        log.info("created session %s", path.name)
        tree = cls(path, header, [], clock, retention)
        tree._dirty = True  # the header's fsync goes with the first sync
        tree.prune()
        return tree

    @classmethod
    def open(cls, path: Path, clock: Clock, retention: Retention | None = None) -> SessionTree:
        """Load an existing session file, cutting off a torn last line (raises :class:`SessionCorrupt`)."""
        header, entries = load(path)
        return cls(path, header, entries, clock, retention)

    @classmethod
    def open_latest(cls, directory: Path, clock: Clock, retention: Retention | None = None) -> SessionTree:
        """Resume the most recent session tree in ``directory``, or create one.

        A file without a readable header is renamed ``<name>.broken`` and a new
        tree is started: the lane comes back cold instead of failing.
        """
        latest = latest_session(directory)
        if latest is None:
            return cls.create(directory, clock, retention)
        try:
            tree = cls.open(latest, clock, retention)
        except SessionCorrupt as exc:
            broken = latest.with_name(latest.name + ".broken")
            os.replace(latest, broken)
            log.error("session %s is unreadable (%s): moved aside as %s; the lane starts cold", latest.name, exc, broken.name)
            return cls.create(directory, clock, retention)
        tree.prune()
        return tree

    def close(self) -> None:
        """Hand the last fsync to the sync threads; the tree is read-only afterwards."""
        if not self._closed:
            self.sync()
            self._closed = True

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
        line = encode_line(entry)
        try:
            append_once(self.path, b"\n" + line if self._torn else line, create=False)  # created with its header
        except OSError:
            self._torn = True  # the next line starts fresh; this half one is skipped on load
            raise
        self._torn = False
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
        directory = self.path.parent
        path, header = _new_file(directory, self._clock.wall(), previous=self.path.name, model=self._model)
        try:
            _write_whole(path, [header, *carried, entry])
        except OSError as exc:
            log.warning("session %s: cannot start a new file (%s); compacting in place", self.path.name, exc.strerror)
            return self.append("compaction", **compaction)
        self.sync()
        log.info("session %s continues %s (%d entries carried)", path.name, self.path.name, len(carried))
        self.path, self.header = path, header
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
        log.info("session %s: cut %d messages of a run that never ended", self.path.name, cut)
        return cut

    def sync(self) -> None:
        """Make every appended line durable soon, off the event loop (called at turn boundaries)."""
        if not self._dirty:
            return
        self._dirty = False
        sync_path_later(self.path)  # opened on the sync thread: no descriptor waits in the queue

    def prune(self) -> list[str]:
        """Delete this lane's session files past the retention bounds (never the current one)."""
        return prune(self.path.parent, self.path.name, self._clock.wall(), self._retention)

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
    if not directory.is_dir():
        return None
    files = sorted(p for p in directory.iterdir() if p.suffix == SUFFIX and p.is_file())
    return files[-1] if files else None


def _new_file(directory: Path, now: float, *, previous: str | None, model: str | None) -> tuple[Path, dict[str, Any]]:
    """A fresh file name that sorts after every session file in ``directory``, and its header."""
    latest = latest_session(directory)
    if latest is not None:
        stamp = stamp_of(latest.name)
        if stamp is not None:
            now = max(now, stamp + 1e-6)  # a clock that stood still or stepped back
    session_id = uuid.uuid4().hex
    name = dt.datetime.fromtimestamp(now, dt.UTC).strftime(STAMP)
    header: dict[str, Any] = {"type": "session", "version": VERSION, "id": session_id, "timestamp": _iso(now)}
    if previous is not None:
        header["previous"] = previous
    if model is not None:
        header["model"] = model
    return directory / f"{name}_{session_id[:8]}{SUFFIX}", header


def _write_whole(path: Path, records: list[dict[str, Any]]) -> None:
    """Write ``records`` to ``<path>.partial``, fsync, rename to ``path`` (all or nothing)."""
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        try:
            write_all(fd, b"".join(encode_line(r) for r in records))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)
        raise
    sync_dir_later(path.parent)
