"""Durability off the event loop: the process's sync threads, and files and directories synced soon.

Every writer of an append-only or replaced file hands its ``fsync`` here
(:class:`clankie.appender.Appender`'s group commit, the unheld lines of
:func:`clankie.appender.append_once`, files replaced whole): a crash of this
process cannot lose what reached the kernel, and the disk catches up on
:data:`SYNC_THREADS` threads shared by the whole process, never on the loop.
Errors are logged, not raised.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

log = logging.getLogger(__name__)

SYNC_THREADS = 2

_pool: ThreadPoolExecutor | None = None


def sync_pool() -> ThreadPoolExecutor:
    """The process's sync threads, shared by every appender (created on first use, anew after a fork)."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=SYNC_THREADS, thread_name_prefix="clankie-sync")
    return _pool


def _forget_pool() -> None:
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)


def sync_dir(directory: Path) -> None:
    """Make renames and new names in ``directory`` durable now (on the caller's thread)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_fd_later(fd: int) -> None:
    """fsync what was written through ``fd`` soon, on the sync threads; the caller may close ``fd`` at once.

    For files written whole on the event loop (a record replaced by rename, a
    lane log line, a session tree at a turn boundary): a crash of this process
    cannot lose what reached the kernel, and the disk catches up without the
    loop ever waiting on it. Errors are logged, not raised.
    """
    sync_pool().submit(_sync_and_close, os.dup(fd))


def sync_dir_later(directory: Path) -> None:
    """Make renames and new names in ``directory`` durable soon (see :func:`sync_fd_later`)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        sync_fd_later(fd)
    finally:
        os.close(fd)


def sync_and_close_later(fd: int) -> None:
    """fsync ``fd`` soon, on the sync threads, then close it: the descriptor is handed over with the call."""
    sync_pool().submit(_sync_and_close, fd)


def _sync_and_close(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError as exc:
        log.error("background sync failed: %s", exc.strerror)
    finally:
        os.close(fd)


_pending_paths: set[Path] = set()
_pending_lock = threading.Lock()


def sync_path_later(path: Path) -> None:
    """fsync the file at ``path`` soon, on the sync threads, holding no descriptor until then.

    For files written by open-write-close (one lane log per room): requests
    for a path already waiting are merged, and the file is opened only while
    its sync runs, so a backlog of syncs never holds descriptors open, however
    many lines or rooms there are. fsync flushes the file whichever descriptor
    wrote it. A file gone by then (rotated away, removed) needs nothing.
    """
    with _pending_lock:
        if path in _pending_paths:
            return
        _pending_paths.add(path)
    sync_pool().submit(_sync_path, path)


def _sync_path(path: Path) -> None:
    with _pending_lock:
        _pending_paths.discard(path)  # a line written from now on asks for a sync of its own
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    except OSError as exc:
        log.error("background sync of %s failed: %s", path.name, exc.strerror)
        return
    _sync_and_close(fd)


os.register_at_fork(after_in_child=_pending_paths.clear)
