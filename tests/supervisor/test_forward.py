"""The supervisor's stderr queue: bounded, drop-oldest, never blocking, never touching fd 2's own flags."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os

from clankie.settings import load
from supervisor.app import stderr_queue
from supervisor.forward import QueueHandler, StderrQueue


def read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


def test_a_full_pipe_drops_the_oldest_lines_and_says_how_many_once_it_moves() -> None:
    """Lines put while nobody reads never block; the oldest go, the newest stay, and a notice counts the loss."""
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
    try:
        q = StderrQueue(w, max_bytes=1000, notice_interval=0.0)
        assert os.get_blocking(w)  # the original fd (shared with logging and others) stays blocking
        for i in range(2000):
            q.put(f"x| line {i:04d}\n".encode())  # would block forever with a blocking write
        assert q.dropped > 0
        first = read_all(r)  # what fitted in the pipe before it filled: the oldest lines, in order
        assert first.startswith(b"x| line 0000\n")
        q.close(timeout=1.0)
        out = (first + read_all(r)).split(b"\n")[:-1]
        notices = [i for i, line in enumerate(out) if line.startswith(b"[clankie: stderr was too slow; dropped ")]
        assert len(notices) == 1 and out[-1] == b"x| line 1999"
        assert all(line.startswith(b"x| line ") and len(line) == 12 for line in out if not line.startswith(b"[clankie"))
        assert len(out) - 1 + q.dropped == 2000  # every line either arrived whole or was counted
    finally:
        os.close(r)
        os.close(w)


def test_the_loop_flushes_when_the_reader_catches_up_and_logging_goes_through_the_queue() -> None:
    """A log record put while the pipe is full reaches the reader once it reads, with no blocking write."""

    async def go(r: int, w: int) -> None:
        q = StderrQueue(w)
        q.attach(asyncio.get_running_loop())
        handler = QueueHandler(q)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger = logging.getLogger("forward-test")
        logger.addHandler(handler)
        logger.propagate = False
        try:
            for i in range(200):
                q.put(f"y| {i}\n".encode() + b"z" * 100 + b"\n")
            logger.warning("last record %d", 7)
            got = b""
            os.set_blocking(r, False)
            while b"forward-test: last record 7\n" not in got:
                try:
                    got += os.read(r, 65536)
                except BlockingIOError:
                    await asyncio.sleep(0.01)  # let the loop's writer callback run
            assert q.dropped == 0
        finally:
            logger.removeHandler(handler)
            q.detach()
            q.close()

    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
    try:
        asyncio.run(asyncio.wait_for(go(r, w), 10))
    finally:
        os.close(r)
        os.close(w)


def test_the_supervisor_queue_holds_what_its_setting_says_and_drops_the_oldest_past_it() -> None:
    """CLANKIE_STDERR_QUEUE_BYTES bounds the unwritten lines; past it the oldest go and are counted."""
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
    try:
        q = stderr_queue(load({"HOME": "/h", "CLANKIE_STDERR_QUEUE_BYTES": "8192"}), fd=w)
        assert q.max_bytes == 8192
        line = b"x| " + b"y" * 1020 + b"\n"  # 1 KiB
        for _ in range(64):  # 4 KiB fit in the pipe, 8 KiB in the queue, the rest is dropped
            q.put(line)
        assert q._queued <= 8192  # the bound: what the stream did not take is at most the setting
        assert q.dropped >= 64 - 16  # everything past pipe + queue was dropped and counted
        q.close(timeout=0.0)
    finally:
        os.close(r)
        os.close(w)
    default = stderr_queue(load({"HOME": "/h"}), fd=1)
    assert default.max_bytes == 1024 * 1024
    default.close()
