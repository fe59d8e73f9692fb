"""The group-commit appender: whole lines at once, the disk in batches, no torn line on a refused write."""

from __future__ import annotations

import asyncio
import os
import stat
import threading
from pathlib import Path

import pytest

from clankie.appender import Appender, DiskError
from clankie.jsonl import read_lines
from tests.disk import writes_refused_past


class CountingSync:
    """Counts real fdatasync calls (and can hold them, to let appends pile up behind one)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, fd: int) -> None:
        self.calls += 1
        os.fdatasync(fd)



def _last_error(a: Appender) -> str | None:
    """Read afresh: a narrowed attribute would hide that the appender changed it."""
    return a.last_error

def test_a_line_is_in_the_file_as_soon_as_append_returns(tmp_path: Path) -> None:
    """append hands the whole line to the kernel: another reader sees it before any sync."""
    a = Appender(tmp_path / "j.jsonl", sync=CountingSync())
    a.append({"n": 1}, {"n": 2})
    assert read_lines(a.path) == [{"n": 1}, {"n": 2}]
    assert stat.S_IMODE(os.stat(a.path).st_mode) == 0o600
    a.close()


def test_a_burst_of_waiters_shares_a_few_syncs(tmp_path: Path) -> None:
    """Fifty appends that each wait for the disk cost at most two syncs, not fifty (group commit)."""
    sync = CountingSync()

    async def main() -> None:
        a = Appender(tmp_path / "j.jsonl", sync=sync)
        seqs = [a.append({"n": i}) for i in range(50)]
        await asyncio.gather(*(a.durable(s) for s in seqs))
        assert sync.calls <= 2
        assert len(read_lines(a.path)) == 50
        await a.durable()  # nothing new: no further sync
        assert sync.calls <= 2
        a.close()

    asyncio.run(main())


def test_a_line_written_during_a_sync_waits_for_the_next_one(tmp_path: Path) -> None:
    """A sync covers only what was written before it began; a later line gets a sync of its own."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        started = asyncio.Event()
        gate = threading.Event()
        calls: list[int] = []

        def slow_sync(fd: int) -> None:
            calls.append(fd)
            loop.call_soon_threadsafe(started.set)
            gate.wait(10)
            os.fdatasync(fd)

        a = Appender(tmp_path / "j.jsonl", sync=slow_sync)
        first = asyncio.ensure_future(a.durable(a.append({"n": 1})))
        await started.wait()
        second_seq = a.append({"n": 2})
        second = asyncio.ensure_future(a.durable(second_seq))
        gate.set()
        await first
        await second
        assert len(calls) == 2
        a.close()

    asyncio.run(main())


def test_a_refused_write_leaves_no_torn_line_and_appends_resume(tmp_path: Path) -> None:
    """When the kernel refuses a write part-way, the file is cut back; once room returns, appends go on."""
    a = Appender(tmp_path / "j.jsonl", sync=CountingSync())
    a.append({"n": 1})
    size = os.path.getsize(a.path)
    with writes_refused_past(size + 10), pytest.raises(DiskError) as refused:
        a.append({"n": 2, "pad": "x" * 100})
    assert refused.value.code == "disk_efbig"
    assert os.path.getsize(a.path) == size
    assert a.last_error == "disk_efbig"
    a.append({"n": 3})
    assert read_lines(a.path) == [{"n": 1}, {"n": 3}]
    assert _last_error(a) is None  # a later append that fits clears the error
    a.close()


def test_a_torn_last_line_from_a_crash_is_ended_before_the_next_append(tmp_path: Path) -> None:
    """A crash mid-line leaves a fragment; the next writer starts a fresh line and no complete line is lost."""
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"n": 1}\n{"n": 2, "tor')
    a = Appender(path, sync=CountingSync())
    a.append({"n": 3})
    assert read_lines(path) == [{"n": 1}, {"n": 3}]
    a.close()


def test_rewrite_keeps_lines_appended_while_it_ran(tmp_path: Path) -> None:
    """Compaction writes the new file off the loop; a line appended meanwhile is carried into it."""

    async def main() -> None:
        gate = threading.Event()

        def held_sync(fd: int) -> None:  # occupies the worker thread, so the rewrite queues behind it
            gate.wait(10)
            os.fdatasync(fd)

        a = Appender(tmp_path / "j.jsonl", sync=held_sync)
        for i in range(5):
            a.append({"old": i})
        a.sync_soon()
        rewriting = asyncio.ensure_future(a.rewrite([{"kept": 1}]))
        await asyncio.sleep(0)  # the rewrite has snapshotted the file and waits for the worker thread
        a.append({"during": 1})
        gate.set()
        await rewriting
        a.append({"after": 1})
        await a.durable()
        assert read_lines(a.path) == [{"kept": 1}, {"during": 1}, {"after": 1}]
        assert stat.S_IMODE(os.stat(a.path).st_mode) == 0o600
        assert not (tmp_path / "j.jsonl.new").exists()
        a.close()

    asyncio.run(main())


def test_a_symlink_in_place_of_the_file_is_refused(tmp_path: Path) -> None:
    """The file is never opened through a symlink."""
    (tmp_path / "j.jsonl").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        Appender(tmp_path / "j.jsonl")


def test_a_line_asked_to_sync_during_a_sync_gets_its_own_round(tmp_path: Path) -> None:
    """sync_soon while a sync runs is not dropped: a second round follows for the later lines."""

    async def main() -> None:
        gate = threading.Event()
        calls: list[int] = []

        def held_sync(fd: int) -> None:
            calls.append(fd)
            gate.wait(10)
            os.fdatasync(fd)

        a = Appender(tmp_path / "j.jsonl", sync=held_sync)
        a.append({"n": 1})
        a.sync_soon()
        await asyncio.sleep(0)
        a.append({"n": 2})
        first = a._round
        a.sync_soon()  # the first round is still running
        assert first is not None and a._round is first
        gate.set()
        await first
        assert a._round is not None and a._round is not first  # the later line's round, started by itself
        await a._round
        assert len(calls) == 2
        a.close()

    asyncio.run(main())


def test_write_takes_bytes_that_are_not_records_and_cuts_back_a_refused_one(tmp_path: Path) -> None:
    """A child's output goes through the same writer: its bytes as they came, no torn write left on a refusal."""
    a = Appender(tmp_path / "child.log", sync=CountingSync())
    a.write(b"\xff not utf-8\n")
    size = os.path.getsize(a.path)
    with writes_refused_past(size + 4), pytest.raises(DiskError):
        a.write(b"a line too long to fit\n")
    assert os.path.getsize(a.path) == size
    a.write(b"half a line")
    a.close()
    assert (tmp_path / "child.log").read_bytes() == b"\xff not utf-8\nhalf a line"


def test_without_mending_an_unfinished_last_line_is_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "child.log"
    path.write_bytes(b"a line\nhalf")
    a = Appender(path, mend=False)
    a.write(b" and the rest\n")
    a.close()
    assert path.read_bytes() == b"a line\nhalf and the rest\n"
