"""The unheld appender: one open-append-close per call, whole lines, no torn line, no descriptor kept."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from clankie.appender import append_once
from clankie.jsonl import encode_line, read_lines
from clankie.rotation import Rotation, read_all, segments
from tests.disk import writes_refused_past
from tests.fds import open_under
from tests.syncs import drain_syncs, sync_threads_held


def test_a_line_is_in_a_new_private_file_and_no_descriptor_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    append_once(path, encode_line({"n": 1}))
    append_once(path, encode_line({"n": 2}) + encode_line({"n": 3}))
    assert open_under(tmp_path) == []
    assert read_lines(path) == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_without_create_a_missing_file_raises_and_is_not_made(tmp_path: Path) -> None:
    """A session tree is created with its header; a line for one that vanished must not start a headerless file."""
    path = tmp_path / "tree.jsonl"
    with pytest.raises(FileNotFoundError):
        append_once(path, encode_line({"n": 1}), create=False)
    assert not path.exists()


def test_a_symlink_in_place_of_the_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "j.jsonl").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        append_once(tmp_path / "j.jsonl", encode_line({"n": 1}))
    assert not (tmp_path / "elsewhere").exists()


def test_a_refused_write_leaves_no_torn_line_and_the_next_one_works(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    append_once(path, encode_line({"n": 1}))
    size = path.stat().st_size
    with writes_refused_past(size + 10), pytest.raises(OSError):
        append_once(path, encode_line({"n": 2, "pad": "x" * 100}))
    assert path.stat().st_size == size
    append_once(path, encode_line({"n": 3}))
    assert read_lines(path) == [{"n": 1}, {"n": 3}]


def test_with_a_rotation_the_file_rotates_right_after_the_line_that_reached_its_size(tmp_path: Path) -> None:
    path = tmp_path / "lane.jsonl"
    rotation = Rotation(rotate_bytes=100, keep_bytes=10_000)
    line = encode_line({"n": 0, "pad": "x" * 30})
    for n in range(5):
        append_once(path, encode_line({"n": n, "pad": "x" * 30}), rotation=rotation)
    rotated = [p for p in segments(path) if p != path]
    assert len(rotated) == 1 and rotated[0].stat().st_size == 3 * len(line)  # 3 lines reach 100 bytes
    assert [r["n"] for r in read_all(path)] == [0, 1, 2, 3, 4]


def test_a_synced_line_holds_no_descriptor_while_its_sync_waits(tmp_path: Path) -> None:
    """The fsync goes to the sync threads by path: with them busy, twenty synced lines hold nothing open."""
    path = tmp_path / "lane.jsonl"
    with sync_threads_held():
        for n in range(20):
            append_once(path, encode_line({"n": n}), rotation=Rotation(rotate_bytes=64, keep_bytes=4096), sync=True)
        assert open_under(tmp_path) == []
    drain_syncs()
    assert open_under(tmp_path) == []
    assert [r["n"] for r in read_all(path)] == list(range(20))
