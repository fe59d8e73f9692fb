"""The delivery store's disk: numbered JSONL segments, and an index of where each delivery's latest line is.

Every change to a delivery appends one line holding its whole current record
(:mod:`service.captain.deliveries.record`) to the current segment ``<n>.jsonl`` through an
:class:`~clankie.appender.Appender`: the line reaches the kernel before the
call returns and the disk on the sync threads; nothing is renamed or synced
on the caller's thread. The latest line for an id wins.

:class:`DeliveryLog` keeps, per delivery, what the crashed-run rule needs and
where its latest line is (segment, offset, length), never a result's text:
that is read back with ``pread`` when a re-submission asks for it. The index
is in ``accepted_at`` order, so expiry pops from the front. A segment rotates
at ``segment_bytes`` and is unlinked as soon as no indexed delivery's latest
line is in it, so the directory holds at most what the last retention window
wrote, plus one segment. Expiry by age (:meth:`DeliveryLog.expire`, on every
accept and settle, with ``now`` passed in) forgets only *settled* records: a
delivery not yet finished keeps its record however old, so its crashed runs
are still counted when it is re-submitted. Past ``max_retained`` records the
oldest settled ones are forgotten first (then the oldest unsettled ones no
turn of this process is running): a re-submission of a forgotten delivery
runs it again, as new.

Start-up reads the segments in order: a torn last line (a crash mid-write) is
skipped, a garbled line is logged and skipped. Records of the old
one-file-per-delivery format (``*.json``) are read first, so any line wins
over them; when the store starts writing, each one still retained is appended
as a line and its file removed.

One writer per directory. A store that only loads (a tool, a test looking at
a live service's records) never writes, rotates or unlinks anything; the
writer starts its own fresh segment and never appends to another's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
from collections import OrderedDict
from collections.abc import Container
from pathlib import Path
from typing import Any

from clankie.appender import Appender, DiskError
from clankie.disksync import sync_dir_later
from clankie.protocol import TurnResult
from clankie.tasks import TaskSet
from service.captain.deliveries.record import UNREADABLE, Entry, fields, legacy_name, parse

log = logging.getLogger(__name__)

SEGMENT_BYTES = 4 * 1024 * 1024
CLOSING_MAX = 16  # rotated segments waiting for their last sync; past it one is closed at once (its sync goes on)
MAX_RETAINED = 100_000
_SEGMENT_NAME = re.compile(r"(\d{1,15})\.jsonl")


class DeliveryLog:
    """The segments of one directory and the index built from them (see the module docstring)."""

    def __init__(self, directory: Path, *, now: float, retention: float, max_retained: int = MAX_RETAINED,
                 segment_bytes: int = SEGMENT_BYTES) -> None:
        self.directory = directory
        self.retention = retention
        self.max_retained = max_retained
        self.segment_bytes = segment_bytes
        self._index: OrderedDict[str, Entry] = OrderedDict()
        self._live: dict[Path, int] = {}  # file -> how many indexed deliveries have their latest line in it
        self._found: list[Path] = []  # every readable file at start-up, for the writer's first clean-up
        self._next = 0  # number of the next segment
        self._writer: Appender | None = None
        self._segment: Path | None = None
        self._owner = False  # this store writes the directory: it may migrate and unlink
        self._closing = TaskSet("delivery segments closing", CLOSING_MAX)
        self.expired_at_start = 0
        self.forgotten = 0  # records dropped at max_retained
        self._rebuild(now)

    def __len__(self) -> int:
        return len(self._index)

    def get(self, delivery_id: str) -> Entry | None:
        return self._index.get(delivery_id)

    def segments(self) -> list[Path]:
        """The segment files in the directory, oldest first."""
        found = ((int(m.group(1)), p) for p in self.directory.iterdir() if (m := _SEGMENT_NAME.fullmatch(p.name)))
        return [p for _, p in sorted(found)]

    # ------------------------------------------------------------ start-up

    def _rebuild(self, now: float) -> None:
        entries: dict[str, Entry] = {}
        for path in sorted(self.directory.glob("*.json")):  # the old format first: any line is newer
            try:
                raw = path.read_bytes()
                data = json.loads(raw)
                did, entry = parse(data, path, 0, len(raw))
                if path.name != legacy_name(did):
                    raise ValueError("the record is not this file's delivery")
                if entry.settled:  # read once, so checked whole now, as the old format's load did
                    TurnResult.model_validate(data["result"])
            except OSError as exc:
                log.error("cannot read delivery record %s: %s; left alone", path.name, exc.strerror)
                continue
            except UNREADABLE as exc:
                log.warning("unreadable delivery record %s (%s); treating it as new", path.name, type(exc).__name__)
                self._found.append(path)
                continue
            self._found.append(path)
            entries[did] = entry
        for path in self.segments():
            self._next = int(path.stem) + 1
            try:
                raw = path.read_bytes()
            except OSError as exc:  # never unlinked: a later start may read it
                log.error("cannot read delivery segment %s: %s; its records are not retained", path.name, exc.strerror)
                continue
            self._found.append(path)
            self._read_segment(path, raw, entries)
        live = sorted((item for item in entries.items() if self._kept(item[1], now)),
                      key=lambda item: item[1].accepted_at)
        self.expired_at_start = len(entries) - len(live)
        for did, entry in live:
            self._index[did] = entry
            self._hold(entry.file)
        self.bound(keep=())

    @staticmethod
    def _read_segment(path: Path, raw: bytes, entries: dict[str, Entry]) -> None:
        pos = 0
        while pos < len(raw):
            end = raw.find(b"\n", pos)
            if end < 0:
                log.info("torn last line of delivery segment %s at byte %d skipped", path.name, pos)
                return
            if end > pos:  # an empty line ends a torn one a writer found after a crash
                try:
                    did, entry = parse(json.loads(raw[pos:end]), path, pos, end + 1 - pos)
                except UNREADABLE as exc:
                    log.warning("garbled line in delivery segment %s at byte %d (%s) skipped",
                                path.name, pos, type(exc).__name__)
                else:
                    entries[did] = entry
            pos = end + 1

    def take_ownership(self) -> None:
        """Become the directory's writer: re-append the old format's retained records, unlink what no record needs."""
        if self._owner:
            return
        self._owner = True
        legacy = [(did, e) for did, e in self._index.items() if e.file.suffix == ".json"]
        migrated = 0
        for did, entry in legacy:
            try:
                result = self.read(entry).get("result") or None
                self.put(did, fields(did, entry.fingerprint, entry.accepted_at, entry.run, entry.crashed_runs, result,
                                     entry.tree), entry.accepted_at)
                migrated += 1
            except UNREADABLE as exc:
                log.warning("unreadable delivery record %s (%s); treating it as new",
                            entry.file.name, type(exc).__name__)
                self._forget(did)
            except DiskError as exc:  # retried by the next start; lines still win over the file
                log.error("could not migrate delivery records (%s); the rest stay in the old format for now", exc.code)
                break
            except OSError as exc:
                log.error("could not migrate delivery records (%s); the rest stay in the old format for now", exc.strerror)
                break
        if migrated:
            log.info("migrated %d delivery records from the one-file-per-delivery format", migrated)
        for path in self._found:
            if path not in self._live:
                self._unlink(path)
        self._found = []
        for tmp in self.directory.glob("*.tmp"):  # the old format's half-written replacements
            self._unlink(tmp)

    # ------------------------------------------------------------ writing

    def put(self, delivery_id: str, fields: dict[str, Any], now: float) -> None:
        """Append ``fields`` as the delivery's latest line and index it; raises :class:`DiskError`, changing nothing."""
        if not self._owner:
            self.take_ownership()
        writer = self._appender()
        offset = writer.size
        writer.append(fields)
        writer.sync_soon()
        assert self._segment is not None
        entry = Entry(fields["fingerprint"], fields["accepted_at"], fields["run"], tuple(fields["crashed_runs"]),
                      bool(fields["result"]), self._segment, offset, writer.size - offset, fields.get("tree"))
        old = self._index.get(delivery_id)
        if old is not None:
            self._index[delivery_id] = entry
            if old.accepted_at != entry.accepted_at:  # accepted again: now the newest
                self._index.move_to_end(delivery_id)
            self._let_go(old.file)
        elif self._kept(entry, now):
            self._index[delivery_id] = entry
        else:  # a turn that outlived the retention: its line is dead already
            return
        self._hold(entry.file)

    def _appender(self) -> Appender:
        writer = self._writer
        if writer is not None and writer.size < self.segment_bytes:
            return writer
        path = self.directory / f"{self._next}.jsonl"
        try:
            fresh = Appender(path)
        except OSError as exc:
            raise DiskError(exc) from None
        self._next += 1
        old, self._writer, self._segment = self._segment, fresh, path
        if writer is not None:
            self._retire(writer)
        if old is not None and old not in self._live:
            self._unlink(old)
        with contextlib.suppress(OSError):
            sync_dir_later(self.directory)
        return fresh

    def _retire(self, writer: Appender) -> None:
        """Close a rotated segment once its last lines are on the disk (at once without an event loop, or with
        :data:`CLOSING_MAX` closing already: :meth:`Appender.close` hands the last lines to the sync threads)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            writer.close()
            return
        if self._closing.full:
            writer.close()
            return
        self._closing.spawn(_close_when_synced(writer), name="segment-close")

    async def aclose(self) -> None:
        """Close every segment once its lines are on the disk (a graceful stop); a later write opens a new one."""
        writer, self._writer = self._writer, None
        if writer is not None:
            self._retire(writer)
        await self._closing.join()

    # ------------------------------------------------------------ reading back

    def read(self, entry: Entry) -> dict[str, Any]:
        """The whole record at ``entry``'s latest line, read from the disk; raises OSError or ValueError."""
        fd = os.open(entry.file, os.O_RDONLY | os.O_CLOEXEC)
        try:
            raw = os.pread(fd, entry.length, entry.offset)
        finally:
            os.close(fd)
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise TypeError("a record is an object")
        return data

    # ------------------------------------------------------------ bounds

    def _kept(self, entry: Entry, now: float) -> bool:
        """Age keeps a record within the retention; a delivery not yet finished is kept at any age."""
        return not entry.settled or now - entry.accepted_at <= self.retention

    def expire(self, now: float) -> int:
        """Forget the settled records older than the retention (they are at the front); returns how many went.

        An unsettled one among them is stepped over and kept: its delivery is
        not finished (only ``max_retained`` bounds those).
        """
        victims: list[str] = []
        for did, entry in self._index.items():
            if now - entry.accepted_at <= self.retention:
                break
            if entry.settled:
                victims.append(did)
        for did in victims:
            self._forget(did)
        return len(victims)

    def bound(self, keep: Container[str]) -> int:
        """Forget records past ``max_retained``: the oldest settled first, then unsettled ones not in ``keep``."""
        excess = len(self._index) - self.max_retained
        if excess <= 0:
            return 0
        victims: list[str] = []
        for settled in (True, False):  # stops at the first victims: O(excess) unless unsettled ones pile up in front
            for did, entry in self._index.items():
                if len(victims) == excess:
                    break
                if entry.settled == settled and (settled or did not in keep):
                    victims.append(did)
        for did in victims:
            self._forget(did)
        if victims and not self.forgotten:
            log.warning("delivery records at the cap of %d: forgetting the oldest; "
                        "a re-submission of one runs it again", self.max_retained)
        self.forgotten += len(victims)
        return len(victims)

    def _forget(self, delivery_id: str) -> None:
        entry = self._index.pop(delivery_id)
        self._let_go(entry.file)

    # ------------------------------------------------------------ which files are needed

    def _hold(self, file: Path) -> None:
        self._live[file] = self._live.get(file, 0) + 1

    def _let_go(self, file: Path) -> None:
        left = self._live[file] - 1
        if left:
            self._live[file] = left
            return
        del self._live[file]
        if self._owner and file != self._segment:
            self._unlink(file)

    def _unlink(self, path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("cannot remove delivery file %s: %s", path.name, exc.strerror)


async def _close_when_synced(writer: Appender) -> None:
    try:
        with contextlib.suppress(DiskError):
            await writer.durable()
    finally:  # also when the loop ends first: close() hands the last lines to the sync threads
        writer.close()
