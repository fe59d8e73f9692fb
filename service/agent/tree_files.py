"""The file adapter of a lane's session tree: one directory of append-only JSONL files, today's format on this disk.

It satisfies :class:`clankie.store.lane_ports.LaneTreeStore` (the contract the PostgreSQL adapter passes too,
``tests/clankie/store/test_contract_lanes.py``). A segment is a file ``<directory>/<name>``:

- **created** exclusively (``O_EXCL``) with its header line;
- **appended** one line per entry, open–append–close on ``O_APPEND`` (:func:`clankie.appender.append_once`: a short
  write is continued, a failed one is cut back and raises ``OSError``); after a failure the next line starts on a
  fresh line, so a half line left behind is skipped on load. The file is not held open: descriptors do not grow
  with the number of lanes;
- **written whole** (a continuation) as ``<name>.partial``, fsynced and renamed, so a crash leaves either the old
  file current or the new one complete;
- **synced** by the sync threads (:func:`clankie.disksync.sync_path_later`), off the event loop;
- **read** back with a torn last line (a crash mid-append) cut off with a warning and unreadable lines skipped; a
  file without a header raises :class:`~service.agent.branch.SessionCorrupt` and is left as it was;
- **set aside** as ``<name>.broken``; **deleted** by retention (:mod:`service.agent.retention` chooses which).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from clankie.appender import append_once
from clankie.disksync import sync_dir_later, sync_path_later
from clankie.jsonl import encode_line, write_all
from clankie.paths import make_private_dirs
from clankie.store.lane_ports import SEGMENT_SUFFIX, Record
from service.agent.branch import SessionCorrupt

log = logging.getLogger(__name__)

KINDS = (".jsonl", ".broken", ".partial")  # every name a lane directory's session files may carry


class FileLaneTree:
    """One lane's session files in ``directory`` (created with the first segment)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._torn: set[str] = set()  # segments whose last write failed: may end in half a line (at most one: current)

    @property
    def label(self) -> str:
        return self.directory.name

    def path(self, name: str) -> Path:
        """Where segment ``name`` is on disk."""
        return self.directory / name

    def names(self) -> list[str]:
        try:
            return [name for name in os.listdir(self.directory) if name.endswith(KINDS)]
        except OSError as exc:
            log.warning("session retention: cannot list %s: %s", self.directory, exc.strerror)
            return []

    def newest(self) -> str | None:
        if not self.directory.is_dir():
            return None
        files = sorted(p.name for p in self.directory.iterdir() if p.suffix == SEGMENT_SUFFIX and p.is_file())
        return files[-1] if files else None

    def read(self, name: str) -> list[Record]:
        path = self.path(name)
        data = path.read_bytes()
        complete_end = data.rfind(b"\n") + 1
        lines = list(_parse(name, data[:complete_end]))
        if not lines or lines[0].get("type") != "session":  # checked first: a broken file is kept as it was
            raise SessionCorrupt(f"{name} has no session header")
        if complete_end < len(data):
            log.warning("session %s: dropping a torn last line (%d bytes)", name, len(data) - complete_end)
            with path.open("r+b") as f:
                f.truncate(complete_end)
                os.fsync(f.fileno())
        return lines

    def set_aside(self, name: str) -> str:
        broken = name + ".broken"
        os.replace(self.path(name), self.path(broken))
        return broken

    def create(self, name: str, header: Record) -> None:
        make_private_dirs(self.directory)
        fd = os.open(self.path(name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            write_all(fd, encode_line(header))
        finally:
            os.close(fd)

    def append(self, name: str, entry: Record) -> None:
        line = encode_line(entry)
        try:
            append_once(self.path(name), b"\n" + line if name in self._torn else line, create=False)  # created with its header
        except OSError:
            self._torn = {name}  # the next line starts fresh; this half one is skipped on load
            raise
        self._torn.discard(name)

    def write_whole(self, name: str, records: list[Record]) -> None:
        path = self.path(name)
        partial = path.with_name(name + ".partial")
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
        sync_dir_later(self.directory)

    def delete(self, names: list[str]) -> list[str]:
        deleted: list[str] = []
        for name in names:
            try:
                self.path(name).unlink()
            except OSError as exc:
                log.warning("session retention: cannot delete %s: %s", name, exc.strerror)
                continue
            deleted.append(name)
        if deleted:
            log.info("session retention: deleted %d old session files in %s", len(deleted), self.directory.name)
        return deleted

    def sync(self, name: str) -> None:
        sync_path_later(self.path(name))  # opened on the sync thread: no descriptor waits in the queue


def _parse(name: str, data: bytes) -> Iterator[Record]:
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            log.warning("session %s: skipping unreadable line %d", name, number)
            continue
        if isinstance(obj, dict):
            yield obj
