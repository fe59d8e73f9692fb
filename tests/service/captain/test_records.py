"""Lane logs and evidence: rotated by size under their caps, and no descriptor left open per turn."""

from __future__ import annotations

from pathlib import Path

from clankie.protocol import Room
from clankie.rotation import Rotation, read_all, segments
from clankie.settings import load
from clankie.testing.clock import FakeClock
from service.captain import records
from service.captain.deliveries.evidence import Evidence
from service.captain.lanes.lane_log import LaneLog
from tests.fds import open_under
from tests.syncs import sync_threads_held


def _room(n: int) -> Room:
    return Room(guild_id="1", channel_id=str(1000 + n))


def test_turns_leave_no_descriptor_open_even_while_the_disk_lags(tmp_path: Path) -> None:
    """Every sync thread held busy (a slow disk): 300 turns in 60 rooms leave no file of theirs open."""
    clock = FakeClock()
    evidence = Evidence(tmp_path / "evidence.jsonl", clock)
    with sync_threads_held():
        for turn in range(300):
            room = _room(turn % 60)
            lane = LaneLog(tmp_path / "lanes" / f"{room.channel_id}.jsonl", room, clock)
            lane.heard(f"message {turn}")
            evidence.record(f"d{turn}", "accepted", lane="l")
            lane.said(f"reply {turn}")
            evidence.record(f"d{turn}", "settled", lane="l")
            assert open_under(tmp_path) == []
    assert evidence.of("d299") == ["accepted", "settled"]


def test_lane_logs_share_one_cap_and_keep_their_recent_lines_across_a_rotation(tmp_path: Path) -> None:
    clock = FakeClock()
    rotation = Rotation(rotate_bytes=4096, keep_bytes=40_000, shared=True)
    lanes = tmp_path / "lanes"
    logs = [LaneLog(lanes / f"r{n}.jsonl", _room(n), clock, rotation=rotation) for n in range(4)]
    for turn in range(600):
        for log in logs:
            log.heard(f"turn {turn}")
        total = sum(p.stat().st_size for p in lanes.iterdir())
        assert total <= rotation.keep_bytes + 3 * rotation.rotate_bytes + 200  # the cap, plus the other live files
    for log in logs:
        assert segments(log.path)  # rotated
        assert [e["text"] for e in log.recent()] == [f"turn {t}" for t in range(560, 600)]
        texts = [e["text"] for e in read_all(log.path)]
        assert texts == [f"turn {t}" for t in range(600 - len(texts), 600)]  # nothing lost between segments


def test_evidence_rotates_by_the_audit_settings(tmp_path: Path) -> None:
    records.configure(load({"HOME": "/h", "CLANKIE_AUDIT_ROTATE_BYTES": "4096", "CLANKIE_AUDIT_KEEP_BYTES": "12288"}))
    try:
        evidence = Evidence(tmp_path / "evidence.jsonl", FakeClock())
        for n in range(500):
            evidence.record(f"d{n}", "accepted", lane="l")
            assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 12288 + 200
        assert segments(evidence.path)
        assert evidence.of("d499") == ["accepted"] and evidence.of("d0") == []  # the oldest segment went
    finally:
        records.configure(load({"HOME": "/h"}))
