"""The supervisor's stderr, written without ever blocking the supervising loop.

Everything the supervisor sends to its stderr (the children's forwarded
lines and its own log records) goes through one bounded in-memory
:class:`StderrQueue`. The queue is flushed with ``loop.add_writer`` on a
private, non-blocking handle on fd 2, so a stalled journald or terminal
can delay those lines but never the loop (and with it ``WATCHDOG=1``,
heartbeats and ``control.sock``). When the queue is full the **oldest**
lines are dropped and counted; a ``[clankie: ...] dropped N lines`` notice
is written ahead of the queued lines once the stream moves again (at most
one per ``notice_interval``), and ``status`` carries the total. The
per-child log files are written separately and always get every byte.

fd 2 itself is never made non-blocking (``O_NONBLOCK`` belongs to the open
file description, shared with every dup of it, and other code writes there):

* a pipe or a terminal is re-opened through ``/proc/self/fd/2``, which gives
  a description of our own that we can make non-blocking;
* a socket (journald's stream) is a dup written with ``send(MSG_DONTWAIT)``;
* a regular file (which never blocks) is a plain dup, so the shared offset
  keeps our lines and anyone else's in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import socket
import stat
import threading
import time
from collections import deque

log = logging.getLogger(__name__)

MAX_BYTES = 1024 * 1024
"""Bytes of not-yet-written stderr lines kept before the oldest are dropped."""

NOTICE_INTERVAL = 5.0
"""Seconds between two "dropped N lines" notices."""


def drop_notice(dropped: int, total: int) -> bytes:
    """The line written once the stream moves again after lines were dropped."""
    return f"[clankie: stderr was too slow; dropped {dropped} lines ({total} since start)]\n".encode()


class _Sink:
    """A private non-blocking way to write to one fd without changing that fd's flags."""

    def __init__(self, fd: int) -> None:
        self.sock: socket.socket | None = None
        mode = os.fstat(fd).st_mode
        self.fd = -1
        self.nonblocking = True
        if stat.S_ISSOCK(mode):
            self.fd = os.dup(fd)
            self.sock = socket.socket(fileno=self.fd)
        elif stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
            try:
                self.fd = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
            except OSError as exc:
                self.fd = os.dup(fd)
                self.nonblocking = False
                log.warning("cannot get a non-blocking handle on fd %d (%s): stderr writes may block", fd, exc.strerror)
        else:
            self.fd = os.dup(fd)  # a regular file (or /dev/null-like): never blocks

    def write(self, data: memoryview) -> int:
        """Bytes written; raises BlockingIOError when the stream is full."""
        if self.sock is not None:
            return self.sock.send(data, socket.MSG_DONTWAIT)
        return os.write(self.fd, data)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        elif self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
        self.fd = -1


class StderrQueue:
    """Bounded, drop-oldest, non-blocking writer for the supervisor's stderr."""

    def __init__(self, fd: int = 2, *, max_bytes: int = MAX_BYTES, notice_interval: float = NOTICE_INTERVAL) -> None:
        self._sink = _Sink(fd)
        self.max_bytes = max_bytes
        self.notice_interval = notice_interval
        self._lines: deque[bytes] = deque()
        self._queued = 0
        self._head = memoryview(b"")  # a line already partly written: never dropped, never split
        self._lock = threading.RLock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None
        self._watching = False
        self._notice_timer: asyncio.TimerHandle | None = None
        self._last_notice = -float("inf")
        self.dropped = 0
        self._reported = 0
        self.broken = False

    # ------------------------------------------------------------ producers

    def put(self, line: bytes) -> None:
        """Queue one complete line (ending in a newline) and write what the stream takes now."""
        with self._lock:
            if self.broken:
                self.dropped += 1
                return
            self._lines.append(line)
            self._queued += len(line)
            while self._queued > self.max_bytes and self._lines:
                self._queued -= len(self._lines.popleft())
                self.dropped += 1
        self._kick()

    # ------------------------------------------------------------ the loop

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """From now on, wait for a full stream with ``loop.add_writer`` (call on the loop's thread)."""
        with self._lock:
            self._loop = loop
            self._thread = threading.get_ident()
        self._kick()

    def detach(self) -> None:
        """Stop using the loop (call on its thread before it closes); lines queued later are written synchronously."""
        with self._lock:
            self._unwatch()
            if self._notice_timer is not None:
                self._notice_timer.cancel()
                self._notice_timer = None
            self._loop = None
            self._thread = None

    def drain(self, timeout: float = 1.0) -> None:
        """At exit: write what is left for up to ``timeout`` seconds, then drop (and count) the rest."""
        self.detach()
        deadline = time.monotonic() + timeout
        while self._flush(force_notice=True):
            left = deadline - time.monotonic()
            if left <= 0 or not self._sink.nonblocking:
                break
            with contextlib.suppress(OSError, ValueError):
                poller = select.poll()
                poller.register(self._sink.fd, select.POLLOUT)
                poller.poll(left * 1000)
        with self._lock:
            left_over = len(self._lines) + (1 if self._head else 0)
            if left_over:
                self.dropped += left_over
                self._lines.clear()
                self._queued = 0
                self._head = memoryview(b"")

    def close(self, timeout: float = 0.0) -> None:
        self.drain(timeout)
        self._sink.close()

    def _kick(self) -> None:
        loop = self._loop
        if loop is not None and threading.get_ident() != self._thread:
            with contextlib.suppress(RuntimeError):  # the loop is closing: detach() writes the rest
                loop.call_soon_threadsafe(self._kick)
            return
        if self._flush():
            self._watch()

    def _writable(self) -> None:
        if not self._flush():
            self._unwatch()

    def _watch(self) -> None:
        with self._lock:
            if self._loop is None or self._watching or self.broken:
                return
            self._loop.add_writer(self._sink.fd, self._writable)
            self._watching = True

    def _unwatch(self) -> None:
        if self._watching and self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_writer(self._sink.fd)
        self._watching = False

    # ------------------------------------------------------------ writing

    def _flush(self, *, force_notice: bool = False) -> bool:
        """Write until the stream is full or the queue empty; True while something is left to write."""
        with self._lock:
            if self.broken:
                return False
            try:
                while True:
                    if not self._head:
                        nxt = self._next(force_notice)
                        if nxt is None:
                            return False
                        self._head = memoryview(nxt)
                    n = self._sink.write(self._head)
                    self._head = self._head[n:]
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:  # the reader went away (EPIPE) or worse: stop forwarding, keep counting
                self.broken = True
                self.dropped += len(self._lines) + (1 if self._head else 0)
                self._lines.clear()
                self._queued = 0
                self._head = memoryview(b"")
                self._unwatch()
                return False

    def _next(self, force_notice: bool) -> bytes | None:
        """The next line to write: a due drop notice first, then the oldest queued line."""
        if self.dropped > self._reported:
            now = time.monotonic()
            if force_notice or now - self._last_notice >= self.notice_interval:
                notice = drop_notice(self.dropped - self._reported, self.dropped)
                self._reported = self.dropped
                self._last_notice = now
                return notice
            self._schedule_notice(self._last_notice + self.notice_interval - now)
        if not self._lines:
            return None
        line = self._lines.popleft()
        self._queued -= len(line)
        return line

    def _schedule_notice(self, delay: float) -> None:
        if self._loop is None or self._notice_timer is not None:
            return
        self._notice_timer = self._loop.call_later(max(0.0, delay), self._notice_due)

    def _notice_due(self) -> None:
        self._notice_timer = None
        self._kick()


class QueueHandler(logging.Handler):
    """A logging handler that puts formatted records on a :class:`StderrQueue` instead of writing them."""

    def __init__(self, queue: StderrQueue, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.queue = queue

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self.queue.put(line.encode("utf-8", "replace") + b"\n")


def route_logging(queue: StderrQueue) -> None:
    """Replace the root logger's stream handlers with a :class:`QueueHandler`, keeping their formatter."""
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, logging.StreamHandler) and not isinstance(old, logging.FileHandler):
            handler = QueueHandler(queue, old.level)
            handler.setFormatter(old.formatter)
            root.removeHandler(old)
            root.addHandler(handler)
