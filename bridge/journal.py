"""The bridge's ingress journal: every admitted delivery, until it has exactly one outcome.

Discord does not redeliver a message the bridge was handed and then lost, so
the bridge writes down what it accepted before it acts on it, in
``<state>/bridge/journal.jsonl`` (directory 0700, file 0600). One JSON line
per event, appended through :class:`clankie.appender.Appender`:

``admit``    a delivery submitted as a turn: the exact ``TurnSubmit`` (so a re-submission
             has the same fingerprint at the service), whether it is a catch-up, and the
             buffered messages it folds in; written before the submission goes out
``buffer``   a message held for a catch-up turn (reply policy ``addressed``)
``wait``     a message admitted while every turn slot was taken, waiting for one (:mod:`bridge.waiting`);
             like ``buffer``, it carries the message, and its ``admit`` (the turn that joins it, as the
             trigger or as a fold) ends its wait
``close``    the outcome (``settled``, ``absorbed``, ``silent``, ``failed``, ``expired``) and
             the ids of the messages posted
``gap``      from ``since`` on, the gateway may have sent messages nobody heard (the process
             started, or a session dropped); ``caught_up`` with ``through`` closes every gap
             that began by then, once history has been read back. A gap a bridge died
             before closing is read back by the next one.

Unlike receipts, the journal holds message text: it is what a turn is run
again from. It is state, like the session trees, never a log. A closed
delivery keeps only its id, time, fingerprint, room and reply mark (its text
is let go at the close, in memory too), and only for ``retention`` seconds:
the bridge passes the catch-up horizon, and the de-duplication memory
(:mod:`bridge.dedupe`, which remembers ids for the whole retention window) is
written whole to ``<state>/bridge/seen.bin`` at each compaction, before the
journal is rewritten without the closed entries it no longer keeps.

:class:`JournalState` is pure: it folds lines into entries and answers what
recovery needs (open deliveries, oldest first; rooms active within the
horizon; the newest message seen per room). :class:`Journal` is the shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from clankie.appender import Appender, DiskError, sync_pool
from clankie.jsonl import read_lines, write_all
from clankie.paths import ensure_private_dir
from clankie.protocol import Room, TurnSubmit

log = logging.getLogger(__name__)

FILENAME = "journal.jsonl"
SEEN_FILENAME = "seen.bin"
OUTCOMES = frozenset({"settled", "absorbed", "silent", "failed", "expired"})
COMPACT_MIN_LINES = 2000
DEFAULT_MAX_BYTES = 256 * 1024 * 1024


@dataclass(slots=True)
class Entry:
    """What the journal knows about one delivery."""

    delivery_id: str
    at: float  # wall time it was admitted
    fingerprint: str
    room: Room
    submit: dict[str, Any] | None = None  # the TurnSubmit on the wire; None while only buffered
    buffered: dict[str, Any] | None = None  # {"inbound": …, "trigger": …} while waiting for a catch-up or a slot
    waiting: bool = False  # buffered for a turn slot (``wait``), not for a catch-up (``buffer``)
    catching_up: bool = False
    folds: tuple[str, ...] = ()
    folded_into: str | None = None
    outcome: str | None = None
    replied: int = 0  # the newest message id posted for it (0: none)
    closed_at: float = 0.0

    @property
    def open(self) -> bool:
        return self.outcome is None

    def turn(self) -> TurnSubmit:
        assert self.submit is not None
        return TurnSubmit.model_validate(self.submit)


def _message_order(delivery_id: str) -> int:
    return int(delivery_id) if delivery_id.isdigit() else 0


class Remembered(Protocol):
    """The de-duplication memory, as the journal saves it (:class:`bridge.dedupe.Dedupe`)."""

    def snapshot(self) -> bytes: ...


class JournalState:
    """Entries by delivery id, folded from journal lines (pure: no I/O, time passed in)."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self._rooms: dict[Room, Room] = {}  # one object per room, shared by its entries
        self.gaps: list[float] = []  # starts of the gaps not yet read back, oldest first
        self.skipped = 0

    def apply(self, line: dict[str, Any]) -> None:
        """Fold one line in; a line that does not make sense is counted and ignored."""
        try:
            self._apply(line)
        except (KeyError, TypeError, ValueError, AssertionError):
            self.skipped += 1

    def _apply(self, line: dict[str, Any]) -> None:
        op = line["op"]
        if op == "gap":
            self.gaps = sorted({*self.gaps, float(line["since"])})
            return
        if op == "caught_up":
            through = float(line["through"])
            self.gaps = [g for g in self.gaps if g > through]
            return
        did = str(line["id"])
        if op == "admit":
            submit = line["submit"]
            room = self._room(submit["room"])
            entry = self.entries.get(did)
            if entry is None or not entry.open:  # a closed one admitted again (its turn could not run) is new
                entry = Entry(did, float(line["at"]), str(line["fp"]), room)
            entry.submit, entry.buffered = submit, None
            entry.catching_up = bool(line.get("catch_up", False))
            entry.folds = tuple(str(f) for f in line.get("folds", ()))
            self.entries[did] = entry
            for fold in entry.folds:
                if fold in self.entries:
                    self.entries[fold].folded_into = did
        elif op in ("buffer", "wait"):
            room = self._room(line["room"])
            self.entries[did] = Entry(did, float(line["at"]), str(line["fp"]), room,
                                      buffered={"inbound": line["inbound"], "trigger": line["trigger"]},
                                      waiting=op == "wait")
        elif op == "close":
            outcome = str(line["outcome"])
            if outcome not in OUTCOMES:
                raise ValueError(outcome)
            entry = self.entries[did]
            entry.outcome = outcome
            entry.closed_at = float(line.get("at", 0.0))
            entry.replied = max((int(m) for m in line.get("mids", ()) if str(m).isdigit()), default=0)
            entry.submit = entry.buffered = None  # its text is never read again: let it go now, not at compaction
        elif op == "closed":  # a compacted closed entry: enough for de-duplication and the room's last id
            room = self._room(line["room"])
            self.entries[did] = Entry(did, float(line["at"]), str(line["fp"]), room, outcome=str(line["outcome"]),
                                      replied=int(line.get("replied", 0)), closed_at=float(line.get("closed_at", 0.0)))
        else:
            raise ValueError(op)

    def _room(self, wire: dict[str, Any]) -> Room:
        room = Room.model_validate(wire)
        return self._rooms.setdefault(room, room)

    # ------------------------------------------------------------ queries

    def quiet_since(self) -> float | None:
        """When the oldest gap not yet read back began (None: nothing is known to be missing)."""
        return self.gaps[0] if self.gaps else None

    def open_entries(self) -> list[Entry]:
        """Deliveries without an outcome that are not folded into another one, oldest first."""
        found = [e for e in self.entries.values() if e.open and e.folded_into is None]
        return sorted(found, key=lambda e: (e.at, _message_order(e.delivery_id)))

    def rooms_since(self, since: float, before: float) -> dict[str, tuple[Room, str | None]]:
        """Rooms with a delivery admitted at or after ``since``, each with the newest message it had
        admitted (or posted) by ``before`` (when the gateway went quiet; None if none): channel → (room, id)."""
        rooms: dict[str, Room] = {}
        newest: dict[str, int] = {}
        for e in self.entries.values():
            cid = e.room.channel_id
            if e.at >= since:
                rooms[cid] = e.room
            if e.at <= before and e.delivery_id.isdigit():
                replied = e.replied if e.closed_at <= before else 0  # a reply posted after the gap began is no mark
                newest[cid] = max(newest.get(cid, 0), int(e.delivery_id), replied)
        return {cid: (room, str(newest[cid]) if cid in newest else None) for cid, room in rooms.items()}

    def retained(self, since: float) -> list[Entry]:
        """Every entry worth keeping: open ones, and closed ones admitted at or after ``since``."""
        return [e for e in self.entries.values() if e.open or e.at >= since]

    def compacted(self, since: float) -> list[dict[str, Any]]:
        """The lines that rebuild :meth:`retained` exactly (folds after the entries they fold)."""
        keep = self.retained(since)
        lines: list[dict[str, Any]] = [{"v": 1, "op": "gap", "since": g} for g in self.gaps]
        for e in sorted(keep, key=lambda e: e.submit is not None):
            lines.extend(entry_lines(e))
        return lines

    def forget_before(self, since: float) -> None:
        for did in [d for d, e in self.entries.items() if not e.open and e.at < since]:
            del self.entries[did]
        self._rooms = {e.room: e.room for e in self.entries.values()}


def entry_lines(e: Entry) -> list[dict[str, Any]]:
    """The shortest lines that rebuild one entry."""
    if not e.open:
        line: dict[str, Any] = {"v": 1, "op": "closed", "id": e.delivery_id, "at": e.at, "fp": e.fingerprint,
                                "room": e.room.to_wire(), "outcome": e.outcome}
        if e.replied:
            line["replied"], line["closed_at"] = e.replied, e.closed_at
        return [line]
    if e.submit is None:
        assert e.buffered is not None
        return [{"v": 1, "op": "wait" if e.waiting else "buffer", "id": e.delivery_id, "at": e.at, "fp": e.fingerprint,
                 "room": e.room.to_wire(), **e.buffered}]
    return [admit_line(e.delivery_id, e.at, e.fingerprint, e.submit, e.catching_up, e.folds)]


def admit_line(did: str, at: float, fp: str, submit: dict[str, Any], catching_up: bool,
               folds: tuple[str, ...]) -> dict[str, Any]:
    line: dict[str, Any] = {"v": 1, "op": "admit", "id": did, "at": at, "fp": fp, "submit": submit}
    if catching_up:
        line["catch_up"] = True
    if folds:
        line["folds"] = list(folds)
    return line


class Journal:
    """The shell: one :class:`Appender`, the state it rebuilds on open, and compaction."""

    def __init__(self, state_dir: Path, *, retention: float, max_bytes: int = DEFAULT_MAX_BYTES,
                 remembered: Remembered | None = None) -> None:
        """``retention``: how long a closed delivery stays in the journal. With ``remembered`` (the de-duplication
        memory) it is saved to ``seen.bin`` at each compaction, before closed entries leave the journal."""
        directory = ensure_private_dir(state_dir / "bridge")
        self.path = directory / FILENAME
        self.seen_path = directory / SEEN_FILENAME
        self.retention = retention
        self.max_bytes = max_bytes
        self.remembered = remembered
        self.state = JournalState()
        for line in read_lines(self.path):
            self.state.apply(line)
        if self.state.skipped:
            log.warning("journal: %d unreadable lines skipped", self.state.skipped)
        self._appender = Appender(self.path)
        self._lines = len(self.state.entries)
        self._compacted_lines = self._lines  # lines right after the last compaction (or at open)
        self._compacting: asyncio.Task[int] | None = None

    @property
    def last_error(self) -> str | None:
        return self._appender.last_error

    @property
    def size(self) -> int:
        """Bytes in the journal file now."""
        return self._appender.size

    @property
    def full(self) -> bool:
        """At ``CLANKIE_DISCORD_JOURNAL_MAX_BYTES``: a message that would wait for a turn slot is refused."""
        return self._appender.size >= self.max_bytes

    def _append(self, *lines: dict[str, Any]) -> int:
        for line in lines:
            self.state.apply(line)
        self._lines += len(lines)
        return self._appender.append(*lines)

    def admit(self, submit: TurnSubmit, fp: str, at: float, *, catching_up: bool, folds: tuple[str, ...] = ()) -> None:
        """Record a delivery about to be submitted: in the kernel before this returns, on the disk soon after.

        The submission does not wait for the disk. A crash of any process
        cannot lose the line; a power cut can lose the newest lines before
        their sync, and the history read-back after the reboot finds those
        messages again (they are newer than anything the journal kept).
        """
        self._append(admit_line(submit.delivery_id, at, fp, submit.to_wire(), catching_up, folds))
        self._appender.sync_soon()

    def buffer(self, did: str, at: float, fp: str, room: Room, inbound: dict[str, Any], trigger: dict[str, Any], *,
               waiting: bool = False) -> None:
        """A message held for a catch-up turn, or (``waiting``) for a turn slot: the journal keeps its payload."""
        self._append({"v": 1, "op": "wait" if waiting else "buffer", "id": did, "at": at, "fp": fp,
                      "room": room.to_wire(), "inbound": inbound, "trigger": trigger})
        self._appender.sync_soon()

    def close(self, did: str, outcome: str, at: float, *, code: str | None = None,
              message_ids: tuple[str, ...] = ()) -> None:
        """Record a delivery's one outcome, and the same for every buffered message it folded in."""
        entry = self.state.entries.get(did)
        lines = [_close_line(did, outcome, at, code, message_ids)]
        folded = "absorbed" if outcome in ("settled", "absorbed") else outcome
        for fold in entry.folds if entry is not None else ():
            lines.append(_close_line(fold, folded, at, None, ()))
        self._append(*lines)
        self._appender.sync_soon()
        if self._lines > max(COMPACT_MIN_LINES, 2 * self._compacted_lines) and self._compacting is None:
            self._compacting = asyncio.get_running_loop().create_task(self._compact_soon(at), name="journal-compaction")

    async def _compact_soon(self, now: float) -> int:
        try:
            left = await self.compact(now)
        except DiskError as exc:
            log.error("journal compaction failed (%s)", exc.code)
            return -1
        finally:
            self._compacting = None
        log.info("journal compacted: %d deliveries kept", left)
        return left

    def gap(self, since: float) -> None:
        """Note that messages sent from ``since`` on may not have reached us (never raises: see :meth:`_note`)."""
        self._note({"v": 1, "op": "gap", "since": since})

    def caught_up(self, through: float) -> None:
        """History has been read back for every gap that began by ``through`` (never raises)."""
        self._note({"v": 1, "op": "caught_up", "through": through})

    def _note(self, line: dict[str, Any]) -> None:
        """A gap line the disk refuses costs one log line: this process reads its gap back all the same, and the
        next start reads every room after the newest message it had admitted, so the gap is read then too."""
        try:
            self._append(line)
        except DiskError as exc:
            log.error("journal: %s line not written (%s)", line["op"], exc.code)
            return
        self._appender.sync_soon()

    async def compact(self, now: float) -> int:
        """Drop closed deliveries older than the retention; returns how many entries remain.

        The de-duplication memory is saved first: if the disk refuses it, the journal keeps every line.
        """
        since = now - self.retention
        if self.remembered is not None:
            data = self.remembered.snapshot()
            try:
                await asyncio.get_running_loop().run_in_executor(sync_pool(), _replace_file, self.seen_path, data)
            except OSError as exc:
                raise DiskError(exc) from None
        self.state.forget_before(since)
        lines = self.state.compacted(since)
        await self._appender.rewrite(lines)
        self._lines = self._compacted_lines = len(lines)
        return len(self.state.entries)

    def read_seen(self) -> bytes | None:
        """The de-duplication memory saved at the last compaction (None: none, or unreadable, which is logged)."""
        try:
            fd = os.open(self.seen_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("journal: cannot read %s (%s); de-duplication starts from the journal alone",
                        SEEN_FILENAME, DiskError(exc).code)
            return None
        with os.fdopen(fd, "rb") as fh:
            return fh.read()

    def aclose(self) -> None:
        if self._compacting is not None:
            self._compacting.cancel()
        self._appender.close()


def _close_line(did: str, outcome: str, at: float, code: str | None, message_ids: Iterable[str]) -> dict[str, Any]:
    line: dict[str, Any] = {"v": 1, "op": "close", "id": did, "at": at, "outcome": outcome}
    if code:
        line["code"] = code
    mids = list(message_ids)
    if mids:
        line["mids"] = mids
    return line


def _replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole (mode 0600, no symlink followed): a new file, synced, renamed over it."""
    tmp = path.with_name(path.name + ".new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        write_all(fd, data)
        os.fsync(fd)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
