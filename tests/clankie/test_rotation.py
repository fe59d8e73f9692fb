"""Rotation by size with a total cap: no line is ever lost or torn, and the cap holds at the bound."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from clankie.appender import Appender
from clankie.rotation import Found, Rotation, enforce_cap, plan_deletions, read_all, read_tail, rotate, segments


def _every_line(path: Path) -> list[dict[str, object]]:
    """Read every segment and the live file raw: each must hold only whole lines that parse."""
    out: list[dict[str, object]] = []
    for file in [*segments(path), path]:
        if not file.exists():  # killed between the rename and the new file: the next append creates it
            continue
        raw = file.read_bytes()
        assert raw == b"" or raw.endswith(b"\n"), f"{file.name} ends in a torn line"
        for line in raw.split(b"\n")[:-1]:
            out.append(json.loads(line))
    return out


def _total(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir())


def test_concurrent_writers_lose_and_tear_nothing_across_rotations(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    appender = Appender(path, rotation=Rotation(rotate_bytes=4096, keep_bytes=1 << 30))
    writers, per_writer = 4, 1500

    def write(w: int) -> None:
        for i in range(per_writer):
            appender.append({"w": w, "i": i, "pad": "x" * (i % 97)})

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    appender.close()

    lines = _every_line(path)
    assert appender.rotations > 50 and len(segments(path)) == appender.rotations
    assert len(lines) == writers * per_writer
    for w in range(writers):  # each writer's lines all there, once, in order, across segments
        assert [line["i"] for line in lines if line["w"] == w] == list(range(per_writer))
    assert read_all(path) == lines


_CHILD = """
import sys
from pathlib import Path
from clankie.appender import Appender
from clankie.rotation import Rotation
a = Appender(Path(sys.argv[1]), rotation=Rotation(rotate_bytes=2048, keep_bytes=1 << 30))
i = 0
while True:
    a.append({"i": i, "pad": "y" * (i % 50)})
    sys.stdout.write(f"{i}\\n")
    sys.stdout.flush()
    i += 1
"""


def test_a_writer_killed_mid_rotation_leaves_every_acknowledged_line_whole(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    acked = -1
    for line in child.stdout:
        acked = int(line)
        if acked >= 3000:
            break
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    lines = _every_line(path)
    numbers = [int(str(line["i"])) for line in lines]
    assert numbers == list(range(len(numbers)))  # nothing missing, nothing doubled, in order
    assert len(numbers) > acked
    assert len(segments(path)) > 10


def test_the_total_cap_holds_at_the_bound_and_keeps_the_newest_lines(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    rotation = Rotation(rotate_bytes=1000, keep_bytes=5000)
    appender = Appender(path, rotation=rotation)
    most = 0
    for i in range(2000):
        appender.append({"i": i})
        most = max(most, _total(tmp_path))
        assert most <= rotation.keep_bytes + 20  # never more than the cap and one line
    appender.close()
    assert most > rotation.keep_bytes - 2 * (rotation.rotate_bytes + 20)  # and it keeps about what it may
    numbers = [int(str(line["i"])) for line in _every_line(path)]
    assert numbers == list(range(numbers[0], 2000))  # a contiguous run ending with the last line written
    assert read_tail(path, 30) == [{"i": i} for i in range(1970, 2000)]


def test_a_shared_cap_covers_every_file_in_the_directory_and_never_removes_a_live_one(tmp_path: Path) -> None:
    rotation = Rotation(rotate_bytes=500, keep_bytes=6000, shared=True)
    rooms = [tmp_path / f"room{n}.jsonl" for n in range(5)]
    appenders = [Appender(p, rotation=rotation) for p in rooms]
    for i in range(400):
        for a in appenders:
            a.append({"i": i})
            # the cap, plus what the other live files wrote since the last rotation (each under rotate_bytes)
            assert _total(tmp_path) <= rotation.keep_bytes + 4 * rotation.rotate_bytes + 20
    for a in appenders:
        a.close()
    assert sum(len(segments(p)) for p in rooms) < sum(a.rotations for a in appenders)  # old segments went
    for p in rooms:
        assert p.exists()
        numbers = [int(str(line["i"])) for line in _every_line(p)]
        assert numbers[-1] == 399 and numbers == list(range(numbers[0], 400))


def test_durable_after_a_rotation_syncs_the_rotated_segment_too(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    synced: list[int] = []

    def sync(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        os.fdatasync(fd)

    async def main() -> None:
        appender = Appender(path, sync=sync, rotation=Rotation(rotate_bytes=100, keep_bytes=10_000))
        appender.append({"pad": "z" * 120})  # rotates right after this line
        appender.append({"after": True})
        await appender.durable()
        assert appender.rotations == 1
        appender.close()

    asyncio.run(main())
    [segment] = segments(path)
    assert segment.stat().st_ino in synced and path.stat().st_ino in synced


def test_plan_deletions_takes_the_oldest_segments_only_until_the_rest_fits() -> None:
    files = [
        Found(Path("a.jsonl"), 400, 50, 0, False),
        Found(Path("a.jsonl.000002"), 300, 20, 2, True),
        Found(Path("a.jsonl.000001"), 300, 10, 1, True),
        Found(Path("b.jsonl.000001"), 300, 30, 1, True),
    ]
    assert plan_deletions(files, 1300) == []
    assert plan_deletions(files, 1000) == [Path("a.jsonl.000001")]
    assert plan_deletions(files, 700) == [Path("a.jsonl.000001"), Path("a.jsonl.000002")]
    assert plan_deletions(files, 100) == [Path("a.jsonl.000001"), Path("a.jsonl.000002"), Path("b.jsonl.000001")]


def test_rotate_numbers_segments_and_a_cap_leaves_other_files_alone(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    other = tmp_path / "notes.txt"
    other.write_text("keep me" * 100)
    for n in range(3):
        path.write_text(json.dumps({"n": n}) + "\n")
        assert rotate(path, Rotation(rotate_bytes=1, keep_bytes=1 << 20)) == tmp_path / f"x.jsonl.{n + 1:06d}"
    assert enforce_cap(path, Rotation(rotate_bytes=1, keep_bytes=10)) == 2
    assert other.exists() and [p.name for p in segments(path)] == ["x.jsonl.000003"]


def test_a_rotation_needs_a_cap_at_least_one_segment() -> None:
    with pytest.raises(ValueError):
        Rotation(rotate_bytes=1000, keep_bytes=999)
