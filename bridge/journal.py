"""The bridge's ingress journal: every admitted delivery, until it has exactly one outcome.

Discord does not redeliver a message the bridge was handed and then lost, so
the bridge writes down what it accepted before it acts on it, in
``<state>/bridge/journal.jsonl`` (directory 0700, file 0600). One JSON line
per event, appended through :class:`clankie.appender.Appender`:

``admit``    a delivery submitted as a turn: the exact ``TurnSubmit`` (so a re-submission
             has the same fingerprint at the service), whether it is a catch-up, and the
             buffered messages it folds in; written before the submission goes out
``buffer``   a message held for a catch-up turn (reply policy ``addressed``)
``wait``     a message admitted while every turn slot was taken, waiting for one (:mod:`bridge.waiting`),
             or (with ``paced``, its author's pace key) over its author's pace (:mod:`bridge.paced`);
             like ``buffer``, it carries the message, and its ``admit`` (the turn that joins it, as the
             trigger or as a fold) ends its wait
``close``    the outcome (a :class:`clankie.protocol.TurnOutcome` value, or ``expired``) and
             the ids of the messages posted; a message the turn folded in gets its own line,
             with :attr:`~clankie.protocol.TurnOutcome.folded` (``expired`` with its turn)
``gap``      from ``since`` on, the gateway may have sent messages nobody heard (the process
             started, or a session dropped); ``caught_up`` with ``through`` closes every gap
             that began by then, once history has been read back. A gap a bridge died
             before closing is read back by the next one.
``closed``   a closed delivery as compaction rewrites it (no text: id, time, fingerprint,
             room, outcome, reply mark)

Each kind is a typed record (:mod:`bridge.journal_lines`), built by the
writer and parsed once when the file is read at start: a malformed line is
logged with its number and reason, skipped, and costs none of the others.

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

Where the lines are kept is a port (:class:`clankie.store.journal_ports.JournalStore`): the file above
(:mod:`bridge.journal_files`, the default), or in the PostgreSQL profile each shard's rows in the database, every
write fenced by the shard's lease (:mod:`clankie.store.journal_pg`); a shard's lines are read when the bridge takes
its lease (:meth:`Journal.take`, docs/multi-machine.md "The journal in the database").
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Protocol

from bridge.journal_files import FileJournalStore
from bridge.journal_lines import (
    EXPIRED,
    CaughtUpLine,
    GapLine,
    JournalLine,
    MalformedLine,
    Wire,
    admit_line,
    caught_up_line,
    close_line,
    gap_line,
    parse_line,
    wait_line,
)
from bridge.journal_state import MAX_REASONS, JournalState, entry_lines
from clankie.appender import DiskError
from clankie.disksync import sync_dir, sync_pool
from clankie.jsonl import replace_file
from clankie.paths import ensure_private_dir
from clankie.protocol import Room, TurnOutcome, TurnSubmit
from clankie.quiet import Quiet
from clankie.shards import room_shard
from clankie.store.journal_ports import JournalRefused, JournalStore, Line, StoredLines
from clankie.store.ports import Shard

log = logging.getLogger(__name__)

FILENAME = "journal.jsonl"
SEEN_FILENAME = "seen.bin"
COMPACT_MIN_LINES = 2000
DEFAULT_MAX_BYTES = 256 * 1024 * 1024


class Remembered(Protocol):
    """The de-duplication memory, as the journal saves it (:class:`bridge.dedupe.Dedupe`)."""

    def snapshot(self) -> bytes: ...


class Journal:
    """The shell: one :class:`Appender`, the state it rebuilds on open, and compaction."""

    def __init__(self, state_dir: Path, *, retention: float, max_bytes: int = DEFAULT_MAX_BYTES,
                 remembered: Remembered | None = None, store: JournalStore | None = None,
                 shard_count: int | None = None) -> None:
        """``retention``: how long a closed delivery stays in the journal. With ``remembered`` (the de-duplication
        memory) it is saved to ``seen.bin`` at each compaction, before closed entries leave the journal. ``store``:
        where the lines are kept (default: the file); ``shard_count``: the bot's shard count, which names the shard
        of each delivery's room (:func:`clankie.shards.room_shard`) for a store that keeps lines by shard."""
        directory = ensure_private_dir(state_dir / "bridge")
        self.path = directory / FILENAME
        self.seen_path = directory / SEEN_FILENAME
        self.retention = retention
        self.max_bytes = max_bytes
        self.remembered = remembered
        self.shard_count = shard_count
        self.store: JournalStore = store if store is not None else FileJournalStore(self.path)
        self.state = JournalState()
        fold(self.store.read(), self.state)
        self._lines = len(self.state.entries)
        self._compacted_lines = self._lines  # lines right after the last compaction (or at open)
        self._unclosed = Quiet("journal: delivery outcomes", "; those deliveries run again after a restart", logger=log)
        self._compacting: asyncio.Task[int] | None = None

    @property
    def last_error(self) -> str | None:
        return self.store.last_error

    @property
    def size(self) -> int:
        """Bytes the journal holds now (the file's; the database's lines of the shards this bridge holds)."""
        return self.store.size

    @property
    def full(self) -> bool:
        """At ``CLANKIE_DISCORD_JOURNAL_MAX_BYTES``: a message that would wait for a turn slot is refused."""
        return self.store.size >= self.max_bytes

    def shard(self, room: Room) -> Shard:
        """The shard whose lease fences a line about a delivery in ``room``."""
        return room_shard(room, self.shard_count)

    def take(self, shard: Shard) -> set[str]:
        """This tree took ``shard``'s lease: its lines in the store replace what this bridge knew of its deliveries
        (another tree may have written them since). Returns the ids of the deliveries this bridge did not know (the
        ones to drain: those it knew are in its hands already, held, waiting or closed). A delivery this bridge
        closed while its close line was refused (the lease was lost meanwhile) and that the store still has open
        stays closed: its close line is written again now. The file's lines were all read at open: nothing
        changes."""
        found = self.store.read_shard(shard)
        if not found.lines and not found.unreadable:
            return set()
        fresh = JournalState()
        fold(found, fresh)
        known = {d: e for d, e in self.state.entries.items() if self.shard(e.room) == shard}
        for did in known:
            del self.state.entries[did]
        self.state.entries.update(fresh.entries)
        self.state.gaps = sorted({*self.state.gaps, *fresh.gaps})
        unwritten = [e for d, e in known.items() if e.outcome is not None and d in fresh.entries and fresh.entries[d].open]
        if unwritten:
            lines = [close_line(e.delivery_id, e.outcome or EXPIRED, e.closed_at,
                                message_ids=(str(e.replied),) if e.replied else ()) for e in unwritten]
            try:
                self._append(shard, *lines)
            except (DiskError, JournalRefused) as exc:
                log.error("journal: %d closes of shard %d/%d not written again (%s)", len(lines), shard[0], shard[1],
                          exc.code)
        return set(fresh.entries) - set(known)

    def _append(self, shard: Shard | None, *lines: JournalLine) -> None:
        for line in lines:
            self.state.apply(line)
        self._lines += len(lines)
        self.store.append(shard, list(lines))  # type: ignore[arg-type]  # a TypedDict is a JSON object

    def admit(self, submit: TurnSubmit, fp: str, at: float, *, catching_up: bool, folds: tuple[str, ...] = ()) -> None:
        """Record a delivery about to be submitted: in the kernel before this returns, on the disk soon after.

        The submission does not wait for the disk. A crash of any process
        cannot lose the line; a power cut can lose the newest lines before
        their sync, and the history read-back after the reboot finds those
        messages again (they are newer than anything the journal kept).
        """
        self._append(self.shard(submit.room), admit_line(submit.delivery_id, at, fp, submit.to_wire(), catching_up, folds))
        self.store.sync_soon()

    def buffer(self, did: str, at: float, fp: str, room: Room, inbound: Wire, trigger: Wire, *,
               waiting: bool = False, paced: str | None = None) -> None:
        """A message held for a catch-up turn, or (``waiting``) for a turn slot or (``paced``: its author's pace key)
        for its author's pace: the journal keeps its payload."""
        self._append(self.shard(room), wait_line("wait" if waiting or paced else "buffer", did, at, fp, room.to_wire(),
                                                 inbound, trigger, paced))
        self.store.sync_soon()

    def close(self, did: str, outcome: TurnOutcome, at: float, *, code: str | None = None,
              message_ids: tuple[str, ...] = ()) -> None:
        """Record a delivery's one outcome, and :attr:`~TurnOutcome.folded` for every buffered message it folded in.
        A line the disk refuses is one log line for the stretch (:class:`clankie.quiet.Quiet`), never an error to the
        caller."""
        self._close(did, outcome, outcome.folded, at, code, message_ids)

    def expire(self, did: str, at: float) -> None:
        """Close a delivery, and every buffered message it folded in, ``expired``: unanswered, past the horizon or out
        of a full backlog (as :meth:`close` when the disk refuses)."""
        self._close(did, EXPIRED, EXPIRED, at, None, ())

    def _close(self, did: str, outcome: str, folded: str, at: float, code: str | None,
               message_ids: tuple[str, ...]) -> None:
        entry = self.state.entries.get(did)
        lines: list[JournalLine] = [close_line(did, outcome, at, code, message_ids)]
        for fold in entry.folds if entry is not None else ():
            lines.append(close_line(fold, folded, at))
        try:  # the outcome stands in memory; only a restart, reading the journal back, would run it again
            self._append(self.shard(entry.room) if entry is not None else None, *lines)
        except (DiskError, JournalRefused) as exc:
            self._unclosed.refused(exc.code)
            return
        self._unclosed.written()
        self.store.sync_soon()
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
        self._note(gap_line(since))

    def caught_up(self, through: float) -> None:
        """History has been read back for every gap that began by ``through`` (never raises)."""
        self._note(caught_up_line(through))

    def _note(self, line: GapLine | CaughtUpLine) -> None:
        """A gap line the disk refuses costs one log line: this process reads its gap back all the same, and the
        next start reads every room after the newest message it had admitted, so the gap is read then too."""
        try:
            self._append(None, line)
        except (DiskError, JournalRefused) as exc:
            log.error("journal: %s line not written (%s)", line["op"], exc.code)
            return
        self.store.sync_soon()

    async def compact(self, now: float) -> int:
        """Drop closed deliveries older than the retention; returns how many entries remain.

        The de-duplication memory is saved first: if the disk refuses it, the journal keeps every line.
        """
        since = now - self.retention
        if self.remembered is not None:
            data = self.remembered.snapshot()
            try:
                await asyncio.get_running_loop().run_in_executor(sync_pool(), _save, self.seen_path, data)
            except OSError as exc:
                raise DiskError(exc) from None
        self.state.forget_before(since)
        lines = self._compacted(since)
        await self.store.rewrite(lines)
        self._lines = self._compacted_lines = len(lines)
        return len(self.state.entries)

    def _compacted(self, since: float) -> list[tuple[Shard | None, Line]]:
        """:meth:`JournalState.compacted`, each line with the shard it is about (None: a gap, every shard's)."""
        lines: list[tuple[Shard | None, Line]] = [(None, dict(gap_line(g))) for g in self.state.gaps]
        for e in sorted(self.state.retained(since), key=lambda e: e.submit is not None):
            shard = self.shard(e.room)
            lines.extend((shard, dict(line)) for line in entry_lines(e))
        return lines

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
        self.store.close()


def fold(found: StoredLines, state: JournalState) -> None:
    """Parse each stored line once and fold it into ``state``; a malformed one is logged with where it was and why
    (never a value: the journal holds message text), skipped, and costs none of the others."""
    malformed = list(found.unreadable)
    read = 0
    for stored in found.lines:
        try:
            line = parse_line(stored.raw)
        except MalformedLine as exc:
            if not stored.torn:  # a torn last line that does not parse is a crash's, not worth a word
                malformed.append(f"{stored.where}: {exc}")
            continue
        state.apply(line)
        read += 1
    skipped = len(malformed) + state.skipped
    if skipped:
        log.warning("journal: %d unreadable lines skipped (%s), the other %d read", skipped,
                    "; ".join((malformed + state.reasons)[:MAX_REASONS]), read - state.skipped)


def _save(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole (:func:`clankie.jsonl.replace_file`) and make the rename durable now."""
    replace_file(path, data)
    sync_dir(path.parent)
