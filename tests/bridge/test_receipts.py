"""Receipts are private, content-free evidence that survives a crash mid-line."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from bridge.receipts import Receipts, _newest_first, audit_rotation, code
from clankie.jsonl import read_lines as read
from clankie.protocol import TurnOutcome
from clankie.rotation import Rotation, read_all, segments
from clankie.settings import load


def test_receipt_lines_carry_ids_and_codes_only(state_dir: Path) -> None:
    """A receipt names ids, the outcome and a code; odd reasons are normalised, never passed through."""
    r = Receipts(state_dir, wall=lambda: 12.0)
    r.record(TurnOutcome.FAILED, delivery_id="42", channel_id="7", guild_id="1", reason="Clankie API 502: {secret body}",
             turn_id="turn-1-42")
    r.record(TurnOutcome.SETTLED, delivery_id="43", channel_id="7", message_ids=("99", "100"))
    lines = read(r.path)
    assert lines[0] == {"v": 1, "at": 12.0, "outcome": "failed", "delivery_id": "42", "guild_id": "1",
                        "channel_id": "7", "reason": "clankie_api_502_secret_body", "turn_id": "turn-1-42"}
    assert lines[1]["message_ids"] == ["99", "100"]
    assert set(lines[1]) == {"v", "at", "outcome", "delivery_id", "guild_id", "channel_id", "message_ids"}


def test_receipt_file_is_private(state_dir: Path) -> None:
    """The receipt file is 0600 in a 0700 directory."""
    r = Receipts(state_dir)
    r.record("accepted", delivery_id="1", channel_id="2")
    assert stat.S_IMODE(os.stat(r.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(r.path.parent).st_mode) == 0o700


def test_symlinked_receipt_file_is_refused(state_dir: Path, tmp_path: Path) -> None:
    """A receipt path replaced by a symlink is not followed."""
    (state_dir / "receipts").mkdir(mode=0o700)
    (state_dir / "receipts" / "bridge.jsonl").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        Receipts(state_dir)


def test_torn_last_line_is_skipped_and_appends_continue(state_dir: Path) -> None:
    """After a crash mid-line the complete lines still read, and new receipts append after it."""
    r = Receipts(state_dir)
    r.record("accepted", delivery_id="1", channel_id="2")
    r.close()
    with open(r.path, "a") as fh:
        fh.write('{"v": 1, "outcome": "sett')
    r2 = Receipts(state_dir)
    r2.record(TurnOutcome.SILENT, delivery_id="3", channel_id="2")
    r2.record(TurnOutcome.SILENT, delivery_id="4", channel_id="2")
    assert [x["delivery_id"] for x in read(r2.path)] == ["1", "3", "4"]


def test_unknown_outcome_is_a_bug(state_dir: Path) -> None:
    """Recording an outcome outside the vocabulary is refused; reasons always become codes."""
    with pytest.raises(ValueError):
        Receipts(state_dir).record("posted_text", delivery_id="1", channel_id="2")  # type: ignore[arg-type]  # an untyped caller
    assert code("") == "unknown"
    assert code("Delivery ID Conflict!") == "delivery_id_conflict"


def test_receipts_rotate_by_size_under_a_total_cap_and_lose_no_line_between(state_dir: Path) -> None:
    """Past CLANKIE_AUDIT_ROTATE_BYTES the file goes to a numbered segment; past the cap the oldest segment goes."""
    rotation = Rotation(rotate_bytes=4096, keep_bytes=16_384)
    r = Receipts(state_dir, wall=lambda: 12.0, rotation=rotation)
    for n in range(1000):
        r.record(TurnOutcome.SETTLED, delivery_id=str(n), channel_id="7")
        total = sum(p.stat().st_size for p in r.path.parent.iterdir())
        assert total <= rotation.keep_bytes + 200
    r.close()
    ids = [int(line["delivery_id"]) for line in read_all(r.path)]
    assert len(segments(r.path)) >= 2 and ids == list(range(ids[0], 1000))  # the newest, contiguous
    s = load({"HOME": "/h", "CLANKIE_AUDIT_ROTATE_BYTES": "8192", "CLANKIE_AUDIT_KEEP_BYTES": "65536"})
    assert audit_rotation(s) == Rotation(rotate_bytes=8192, keep_bytes=65536)


def test_closing_receipts_are_read_back_through_rotated_segments_as_far_as_asked(state_dir: Path) -> None:
    """``closings`` finds a message's closing receipt (not its steps) in the file or an older segment, with its code
    and posted ids; it reads back only to the segment that reaches ``since``, so a receipt older than that is not
    looked for."""
    now = [100.0]
    r = Receipts(state_dir, wall=lambda: now[0], rotation=Rotation(rotate_bytes=400, keep_bytes=100_000))
    r.record("accepted", delivery_id="1", channel_id="7")
    r.record(TurnOutcome.SETTLED, delivery_id="1", channel_id="7", turn_id="t1", message_ids=("90", "91"))
    r.record("dropped", delivery_id="2", channel_id="7", reason="backlog_full")
    for n in range(3, 20):
        now[0] = 100.0 + n
        r.record("accepted", delivery_id=str(n), channel_id="7")
    r.record(TurnOutcome.FAILED, delivery_id="19", channel_id="7", reason="captain_turn_stalled")
    assert len(segments(r.path)) >= 3
    found = r.closings({"1", "2", "3", "19"}, since=100.0)
    assert found.keys() == {"1", "2", "19"}  # "3" was only accepted: still open
    assert (found["1"].outcome, found["1"].turn_id, found["1"].message_ids) == ("settled", "t1", ("90", "91"))
    assert (found["2"].outcome, found["2"].reason) == ("dropped", "backlog_full")
    assert found["19"].reason == "captain_turn_stalled"
    assert r.closings({"1"}, since=118.0) == {}  # asked about nothing older than 118: the oldest segments are not read
    assert r.closings(set(), since=0.0) == {}


def test_receipts_read_newest_first_are_every_readable_line_whatever_the_block_size(state_dir: Path) -> None:
    """Reading a receipts file from its end, a block at a time, gives its readable lines newest first, at any block
    size: a line cut by a block boundary is read whole, and a torn last line is skipped as every reader skips it."""
    r = Receipts(state_dir, wall=lambda: 5.0)
    for n in range(12):
        r.record("accepted", delivery_id=str(10**n), channel_id="7")
    with open(r.path, "ab") as fh:
        fh.write(b'{"v":1,"at":6.0,"outc')  # a crash mid-write
    whole = list(reversed(read(r.path)))
    assert len(whole) == 12
    for block in (1, 7, 64, 1 << 16):
        assert list(_newest_first(r.path, block)) == whole
