"""Receipts are private, content-free evidence that survives a crash mid-line."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from bridge.receipts import Receipts, code
from clankie.jsonl import read_lines as read


def test_receipt_lines_carry_ids_and_codes_only(state_dir: Path) -> None:
    """A receipt names ids, the outcome and a code; odd reasons are normalised, never passed through."""
    r = Receipts(state_dir, wall=lambda: 12.0)
    r.record("failed", delivery_id="42", channel_id="7", guild_id="1", reason="Clankie API 502: {secret body}",
             turn_id="turn-1-42")
    r.record("settled", delivery_id="43", channel_id="7", message_ids=("99", "100"))
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
    r2.record("silent", delivery_id="3", channel_id="2")
    r2.record("silent", delivery_id="4", channel_id="2")
    assert [x["delivery_id"] for x in read(r2.path)] == ["1", "3", "4"]


def test_unknown_outcome_is_a_bug(state_dir: Path) -> None:
    """Recording an outcome outside the vocabulary is refused; reasons always become codes."""
    with pytest.raises(ValueError):
        Receipts(state_dir).record("posted_text", delivery_id="1", channel_id="2")
    assert code("") == "unknown"
    assert code("Delivery ID Conflict!") == "delivery_id_conflict"
