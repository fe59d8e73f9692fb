"""Append-only JSONL with group commit: each line reaches the kernel at once, the disk in batches.

:class:`Appender` owns one file, opened ``O_APPEND`` without following
symlinks and kept at mode 0600. :meth:`Appender.append` hands a whole line to
the kernel on the caller's thread and returns its sequence number: once it
returns, a crash of this process cannot lose the line (the page cache
outlives us). :meth:`Appender.durable` waits until an ``fdatasync`` that
*began after* that line was written has finished, which also covers a crash
of the machine. Syncs run on the process's sync threads and each covers every line
written before it started, so a burst of N appends costs one or two syncs,
never N (group commit), and the event loop never waits on the disk.

A write that fails part-way (``ENOSPC``, ``EIO``) is cut back to the file's
previous length, so no torn line is left behind, and raises
:class:`DiskError`; the next append works again once space returns.

With a :class:`~clankie.rotation.Rotation` the file is rotated by size
(:mod:`clankie.rotation`): right after the whole line that reached
``rotate_bytes``, under the lock every append takes. The rotated file's
descriptor is kept until the next sync round has synced it, so
:meth:`Appender.durable` still covers the lines written before the rotation.

:func:`append_once` is the unheld form, for files too many to hold open: each
call opens, appends whole lines the same way, rotates the same way and closes;
its sync, when asked for, goes to the same threads (:mod:`clankie.disksync`).
Every append-only file in the tree is written by one of the two; the
children's output logs (:mod:`supervisor.output`) through :meth:`Appender.write`,
since they are bytes, not records.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from clankie.disksync import (
    sync_and_close_later,
    sync_dir,
    sync_dir_later,
    sync_fd_later,
    sync_path_later,
    sync_pool,
)
from clankie.errors import ClankieError
from clankie.jsonl import append_all, encode_line, write_all
from clankie.rotation import Rotation, rotate

log = logging.getLogger(__name__)

Sync = Callable[[int], None]
_ONCE = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW


class DiskError(ClankieError):
    """Raised when the disk refused a line (full, read-only, failing); ``code`` names the errno."""

    def __init__(self, exc: OSError) -> None:
        self.errno = exc.errno or errno.EIO
        self.code = "disk_full" if self.errno == errno.ENOSPC else f"disk_{errno.errorcode.get(self.errno, 'error').lower()}"
        super().__init__(f"{self.code}: {exc.strerror or exc}")


def _open(path: Path) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)
    return fd


_rotating = threading.Lock()  # an unheld line of a rotated file and the rotation after it, one at a time


def append_once(path: Path, data: bytes, *, create: bool = True, rotation: Rotation | None = None,
                sync: bool = False) -> None:
    """Append ``data`` (whole lines) to ``path`` through a descriptor opened for this write alone; raises ``OSError``.

    The unheld form of :class:`Appender`, for files too many or too short-lived
    to hold open (a lane log per room, a session tree per lane, a ledger per
    day): open descriptors never grow with them. The file is created at 0600
    when missing (unless ``create`` is false: then a missing file raises), no
    symlink is followed, and a write that fails part-way is cut back, so it
    leaves no torn line. With ``rotation`` the file is rotated right after the
    line that reached ``rotation.rotate_bytes``. With ``sync`` its fsync (and
    a rotated segment's and the directory's) is handed to the sync threads,
    merged per path, holding no descriptor while it waits
    (:func:`clankie.disksync.sync_path_later`).
    """
    segment = None
    if rotation is None:
        _write_once(path, data, create)
    else:
        with _rotating:
            if _write_once(path, data, create) >= rotation.rotate_bytes:
                segment = rotate(path, rotation)
    if not sync:
        return
    sync_path_later(path if segment is None else segment)
    if segment is not None:
        sync_dir_later(path.parent)


def _write_once(path: Path, data: bytes, create: bool) -> int:
    """One whole write through a descriptor of its own; returns the file's size after it."""
    fd = os.open(path, _ONCE | os.O_CREAT if create else _ONCE, 0o600)
    try:
        return append_all(fd, data)
    finally:
        os.close(fd)


class Appender:
    """The only writer of one append-only JSONL file."""

    def __init__(self, path: Path, *, sync: Sync = os.fdatasync, rotation: Rotation | None = None,
                 mend: bool = True) -> None:
        """Open ``path`` (0600, created if missing, no symlink followed; raises ``OSError``). ``mend``: end a torn
        last line first (JSONL); false for a byte log whose last line may be unfinished by design."""
        self.path = path
        self._sync = sync
        self._rotation = rotation
        self._lock = threading.Lock()  # one line at a time, and rotation only between lines
        self._retired: list[int] = []  # rotated files' descriptors, closed once a sync round has synced them
        self.rotations = 0
        self._fd = _open(path)
        self._size = os.fstat(self._fd).st_size
        self._written = 0  # sequence number of the last line handed to the kernel
        self._synced = 0  # every line up to this one is on the disk
        self._round: asyncio.Future[None] | None = None
        self._again = False  # a sync_soon arrived while a round ran: sync again when it ends
        self.failures = 0
        self.last_error: str | None = None
        if mend:
            self._end_torn_line()

    @property
    def size(self) -> int:
        return self._size

    def _end_torn_line(self) -> None:
        """After a crash mid-line, start on a fresh line so the next one is not glued to the torn one."""
        if self._size == 0:
            return
        with open(self.path, "rb") as fh:
            fh.seek(self._size - 1)
            if fh.read(1) != b"\n":
                self._write(b"\n")

    # ------------------------------------------------------------ writing

    def _write(self, data: bytes) -> None:
        try:
            write_all(self._fd, data)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)  # leave no torn line behind
            self.failures += 1
            error = DiskError(exc)
            self.last_error = error.code
            raise error from None
        self._size += len(data)
        self.last_error = None

    def append(self, *records: Mapping[str, object]) -> int:
        """Write ``records`` as whole lines in one write; returns the sequence number to wait on.

        With a rotation, the file is rotated right after the line that reached its size.
        """
        return self.write(b"".join(encode_line(r) for r in records))

    def write(self, data: bytes) -> int:
        """Write ``data`` in one write, cut back if it fails part-way; returns the sequence number to wait on.

        :meth:`append` for bytes that are not JSON records (a child's output): whole lines are the caller's to keep.
        """
        with self._lock:
            self._write(data)
            self._written += 1
            if self._rotation is not None and self._size >= self._rotation.rotate_bytes:
                self._rotate(self._rotation)
            return self._written

    def _rotate(self, rotation: Rotation) -> None:
        if rotate(self.path, rotation) is None:
            return  # logged; the file goes on growing and no line is lost
        try:
            fresh = _open(self.path)
        except OSError as exc:  # the next lines go on into the segment the old descriptor now names
            log.error("cannot start a new %s after rotating: %s", self.path.name, exc.strerror)
            return
        self._retired.append(self._fd)
        self._fd, self._size = fresh, 0
        self.rotations += 1

    async def durable(self, seq: int | None = None) -> None:
        """Wait until line ``seq`` (default: the last one written) is on the disk; raises :class:`DiskError`."""
        target = self._written if seq is None else seq
        while self._synced < target:
            if self._round is None:
                self._round = asyncio.ensure_future(self._sync_round())
            await asyncio.shield(self._round)

    def sync_soon(self) -> None:
        """Start a sync for what has been written without waiting for it (errors are logged, not raised).

        A sync already under way covers only the lines written before it began;
        the lines after it get a round of their own as soon as it ends.
        """
        if self._synced >= self._written:
            return
        if self._round is not None:
            self._again = True
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop (a tool or a test): sync inline
            self._sync_now()
            return
        self._round = asyncio.ensure_future(self._sync_round())
        self._round.add_done_callback(_log_failure)

    def _take_fds(self) -> list[int]:
        """Descriptors for one sync round (closed by it): the rotated files' and a duplicate of the current one
        (none once the file is closed: :meth:`close` has handed its last lines to the sync threads already)."""
        with self._lock:
            live = [os.dup(self._fd)] if self._fd >= 0 else []
            fds, self._retired = [*self._retired, *live], []
        return fds

    async def _sync_round(self) -> None:
        upto = self._written
        try:
            fds = self._take_fds()
            await asyncio.get_running_loop().run_in_executor(sync_pool(), _sync_all, self._sync, fds, self.path.parent)
        except OSError as exc:
            self.failures += 1
            error = DiskError(exc)
            self.last_error = error.code
            raise error from None
        finally:
            self._round = None
        self._synced = max(self._synced, upto)
        if self._again:
            self._again = False
            self.sync_soon()

    def _sync_now(self) -> None:
        try:
            _sync_all(self._sync, self._take_fds(), self.path.parent)
        except OSError as exc:
            self.failures += 1
            self.last_error = DiskError(exc).code
            log.error("cannot sync %s: %s", self.path.name, exc.strerror)
            return
        self._synced = self._written

    # ------------------------------------------------------------ compaction

    async def rewrite(self, records: Iterable[Mapping[str, object]]) -> None:
        """Replace the file with ``records``: a new file written and synced off the loop, then renamed in.

        Appends may go on meanwhile; the lines they add to the old file are
        carried over to the new one just before the rename, so none is lost.
        A file rotated by size is never rewritten (its lines may be in segments).
        """
        if self._rotation is not None:
            raise ValueError("a file rotated by size is not rewritten")
        start, upto = self._size, self._written
        data = b"".join(encode_line(r) for r in records)
        tmp = self.path.with_name(self.path.name + ".new")
        try:
            await asyncio.get_running_loop().run_in_executor(sync_pool(), _write_file, tmp, data)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise DiskError(exc) from None
        while self._round is not None:  # never close the old fd under a sync in flight
            with contextlib.suppress(DiskError):
                await asyncio.shield(self._round)
        # from here to the swap: no await, so no line can slip past
        tail = _read_from(self.path, start)
        fd = os.open(tmp, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            write_all(fd, tail)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise DiskError(exc) from None
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        os.close(self._fd)
        self._fd = _open(self.path)
        self._size = os.fstat(self._fd).st_size
        self._synced = max(self._synced, upto)  # the carried-over tail waits for the next sync
        with contextlib.suppress(OSError):
            sync_dir(self.path.parent)

    def close(self) -> None:
        """Close the file; its last lines reach the disk on the sync threads, not on the caller's."""
        if self._fd >= 0:
            for fd in self._retired:
                sync_and_close_later(fd)
            self._retired = []
            sync_fd_later(self._fd)
            os.close(self._fd)
            self._fd = -1


def _sync_all(sync: Sync, fds: list[int], directory: Path) -> None:
    """Sync and close every descriptor (the last is the live file's); with rotated ones, the directory too."""
    error: OSError | None = None
    for fd in fds:
        try:
            sync(fd)
        except OSError as exc:
            error = error or exc
        finally:
            os.close(fd)
    if len(fds) > 1:
        try:
            sync_dir(directory)
        except OSError as exc:
            error = error or exc
    if error is not None:
        raise error


def _write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_from(path: Path, offset: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read()


def _log_failure(future: asyncio.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("background sync failed: %s", future.exception())
