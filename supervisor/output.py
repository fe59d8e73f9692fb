"""Child stdout/stderr: to a rotating per-child log file and to our stderr, prefixed.

Each child gets two pipes. Their read ends are non-blocking and watched with
``loop.add_reader``. Bytes go to ``<state>/logs/<name>.log`` unchanged
(invalid UTF-8 and a missing final newline included), a whole line at a
time (the end of an unfinished line waits for its newline or the child's
exit), so a full disk costs whole lines and never leaves half of one; and,
line by line, to
the supervisor's stderr as ``<name>| <line>`` (journald under systemd)
through the non-blocking, drop-oldest :class:`supervisor.forward.StderrQueue`.
When the child exits its pipes are drained to EAGAIN/EOF before they are
closed, so nothing the child wrote is lost, and a grandchild that keeps the
pipe open cannot delay the restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from clankie.appender import Appender, DiskError
from clankie.paths import make_private_dirs
from supervisor.forward import StderrQueue

log = logging.getLogger(__name__)

READ_CHUNK = 65536
LINE_MAX = 65536
"""A line longer than this goes to the log file in pieces (the file otherwise gets whole lines only)."""


class RotatingLog:
    """An append-only log file that rolls to ``.1`` … ``.N`` past ``max_bytes`` and survives a full disk.

    The file is written through a :class:`clankie.appender.Appender` (bytes,
    not records; no symlink followed). A write that fails (``ENOSPC``, ``EIO``,
    a vanished directory) never raises: the file is cut back to its length
    before the write, the bytes are counted as lost,
    :attr:`problem` says why (shown by ``status`` and systemd's ``STATUS=``)
    and ``on_problem`` is called. The first write that works again puts a
    ``[clankie: N bytes … were not written …]`` line in front of its data and
    clears the problem. The child's lines still reach the journal meanwhile.
    """

    def __init__(
        self,
        path: Path,
        max_bytes: int = 10 * 1024 * 1024,
        backups: int = 5,
        on_problem: Callable[[], None] | None = None,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.on_problem = on_problem
        self.problem = ""  # why writes fail right now ("" while they work)
        self.lost_bytes = 0  # bytes not written since the problem began
        self.lost_total = 0
        self._file: Appender | None = None
        self._ends_line = True
        try:
            self._open()
        except OSError as exc:
            self._failed(exc, 0)

    def _open(self) -> Appender:
        make_private_dirs(self.path.parent)
        self._file = Appender(self.path, mend=False)  # bytes unchanged: an unfinished last line stays as it is
        return self._file

    def write(self, data: bytes) -> None:
        payload = data
        try:
            file = self._file or self._open()
            if self.problem:
                payload = self._gap_notice() + data
            if file.size and file.size + len(payload) > self.max_bytes:
                self.rotate()
                file = self._open()
            file.write(payload)
        except (OSError, DiskError) as exc:
            self._failed(exc, len(data))
            return
        self._ends_line = payload.endswith(b"\n")
        if self.problem:
            log.info("writing %s again; %d bytes of its output were not written", self.path.name, self.lost_bytes)
            self.problem, self.lost_bytes = "", 0
            if self.on_problem is not None:
                self.on_problem()

    def _gap_notice(self) -> bytes:
        lead = b"" if self._ends_line else b"\n"
        return lead + f"[clankie: {self.lost_bytes} bytes of output were not written here: {self.problem}]\n".encode()

    def _failed(self, exc: OSError | DiskError, lost: int) -> None:
        self.lost_bytes += lost
        self.lost_total += lost
        why = os.strerror(exc.errno) if isinstance(exc, DiskError) else exc.strerror or type(exc).__name__
        if why == self.problem:
            return
        first = not self.problem
        self.problem = why
        if first:
            log.warning("cannot write %s: %s; its lines still reach the journal", self.path.name, why)
        if self.on_problem is not None:
            self.on_problem()

    def rotate(self) -> None:
        """Roll the files; the caller opens the new one. Raises ``OSError`` (handled by :meth:`write`)."""
        self.close()
        if self.backups > 0:
            for i in range(self.backups - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{i}")
                if older.exists():
                    older.replace(self.path.with_name(f"{self.path.name}.{i + 1}"))
            if self.path.exists():
                self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        else:
            self.path.unlink(missing_ok=True)

    def close(self) -> None:
        """Close the file (its last bytes reach the disk on the sync threads); the next write opens it again."""
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()


class Forwarder:
    """Puts complete lines on the supervisor's stderr queue with a ``name| `` prefix.

    The queue (:class:`supervisor.forward.StderrQueue`) never blocks: when
    stderr is too slow it drops the oldest lines, and only there; the
    log file has been written before this is called.
    """

    def __init__(self, name: str, queue: StderrQueue) -> None:
        self.prefix = f"{name}| ".encode()
        self.queue = queue
        self._partial = b""

    def feed(self, data: bytes) -> None:
        buf = self._partial + data
        lines = buf.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > 8192:  # an endless line: cut it
            lines.append(self._partial)
            self._partial = b""
        for line in lines:
            self.queue.put(self.prefix + line + b"\n")

    def flush(self) -> None:
        if self._partial:
            self.queue.put(self.prefix + self._partial + b"\n")
            self._partial = b""


class Capture:
    """One pipe read end, feeding a log file and a forwarder; keeps the last line."""

    def __init__(
        self,
        fd: int,
        sink: RotatingLog,
        forward: Forwarder | None,
        on_data: Callable[[], None] | None = None,
    ) -> None:
        self.fd = fd
        self.sink = sink
        self.forward = forward
        self.on_data = on_data
        self.last_line = b""
        self._tail = b""
        self._partial = b""  # the end of an unfinished line, held back from the log file
        self.closed = False
        os.set_blocking(fd, False)
        asyncio.get_running_loop().add_reader(fd, self._readable)

    def _readable(self) -> None:
        self._read(once=True)

    def _read(self, *, once: bool) -> None:
        while not self.closed:
            try:
                data = os.read(self.fd, READ_CHUNK)
            except BlockingIOError:
                return
            except OSError as exc:
                log.warning("reading child output failed: %s", exc)
                self.close()
                return
            if not data:
                self.close()
                return
            self._consume(data)
            if once:
                return

    def _consume(self, data: bytes) -> None:
        buf = self._partial + data
        cut = buf.rfind(b"\n") + 1
        if len(buf) - cut > LINE_MAX:
            cut = len(buf)
        if cut:
            self.sink.write(buf[:cut])  # whole lines: a full disk costs lines, never half of one
        self._partial = buf[cut:]
        if self.forward is not None:
            self.forward.feed(data)
        text = self._tail + data
        lines = [line for line in text.split(b"\n") if line.strip()]
        if lines:
            self.last_line = lines[-1][-400:]
        self._tail = text[-400:]
        if self.on_data is not None:
            self.on_data()

    def drain_and_close(self) -> None:
        """The writer died: take whatever is buffered in the pipe, then close."""
        self._read(once=False)
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self.fd)
        with contextlib.suppress(OSError):
            os.close(self.fd)
        if self._partial:
            self.sink.write(self._partial)  # the child is gone: its last bytes, newline or not
            self._partial = b""
        if self.forward is not None:
            self.forward.flush()


REPLY_LIMIT = 512 * 1024
"""Most log bytes one ``logs`` reply carries: well under the 1 MiB frame limit."""


def truncation_notice(kept: int) -> bytes:
    """The line put in front of a ``logs`` reply that had to be cut to ``kept`` bytes."""
    return f"[clankie: truncated; only the newest {kept} bytes of the lines asked for follow]\n".encode()


def read_tail(path: Path, lines: int, limit: int = REPLY_LIMIT) -> tuple[bytes, int]:
    """The last ``lines`` lines of ``path`` (at most ``limit`` bytes) and the file size (the offset to follow from).

    When the lines asked for are longer than ``limit``, only the newest whole
    lines that fit are returned, after a :func:`truncation_notice` line.
    """
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if lines <= 0:
                return b"", size
            block, data = 65536, b""
            pos = size
            while pos > 0 and data.count(b"\n") <= lines and len(data) <= limit:
                step = min(block, pos)
                pos -= step
                f.seek(pos)
                data = f.read(step) + data
    except FileNotFoundError:
        return b"", 0
    newline = data.endswith(b"\n")
    parts = data.split(b"\n")
    if newline:
        parts.pop()
    short = pos > 0 and len(parts) <= lines  # stopped at the byte limit, not at the line count
    if short:
        parts = parts[1:]  # the first piece may be the end of a longer line
    text = b"\n".join(parts[-lines:]) + (b"\n" if newline and parts else b"")
    if not short and len(text) <= limit:
        return text, size
    room = limit - 100
    if len(text) > room:
        text = text[len(text) - room:]
        nl = text.find(b"\n")
        if 0 <= nl < len(text) - 1:
            text = text[nl + 1:]
    return truncation_notice(len(text)) + text, size


def read_from(path: Path, offset: int, limit: int = REPLY_LIMIT) -> tuple[bytes, int]:
    """Bytes after ``offset`` (restarting at 0 if the file was rotated/truncated) and the new offset."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if offset > size:
                offset = 0
            f.seek(offset)
            data = f.read(limit)
            return data, offset + len(data)
    except FileNotFoundError:
        return b"", 0
