"""Spend read back from the session trees: per lane directory and per UTC day."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clankie import spend
from clankie.protocol import Tokens


def message(day: str, **usage: int) -> dict[str, Any]:
    return {"type": "message", "id": "e", "parent_id": None, "timestamp": f"{day}T12:00:00.000+00:00",
            "message": {"role": "assistant", "content": []}, "usage": usage}


def write_tree(path: Path, entries: list[dict[str, Any]], torn: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"type": "session", "version": 1, "id": "s", "timestamp": "2027-01-15T00:00:00.000+00:00"}
    text = "".join(json.dumps(e) + "\n" for e in [header, *entries])
    path.write_text(text + ('{"type": "message", "usage": {"output"' if torn else ""), encoding="utf-8")


def test_message_usage_is_summed_and_everything_else_ignored() -> None:
    """Only message entries with usage count; a malformed count is zero; a day filter keeps that UTC day."""
    entries = [
        message("2027-01-15", input=10, cache_read=100, cache_write=5, output=7),
        message("2027-01-14", input=1, output=1),
        {"type": "custom", "usage": {"input": 999}},
        message("2027-01-15", input=-3, output=True),  # a bool where a count belongs: skipped, not counted
    ]
    assert spend.of_entries(entries) == Tokens(input=11, cache_read=100, cache_write=5, output=8)
    assert spend.of_entries(entries, "2027-01-15") == Tokens(input=10, cache_read=100, cache_write=5, output=7)


def test_a_lane_directory_and_a_day_are_summed_over_every_tree(tmp_path: Path) -> None:
    """A lane's trees are summed whole; the day's total covers rooms, system lanes and one-shots, torn lines skipped."""
    captain = tmp_path / "captain"
    write_tree(captain / "rooms/a/s1.jsonl", [message("2027-01-15", input=1, output=2)])
    write_tree(captain / "rooms/a/s2.jsonl", [message("2027-01-14", input=4, output=8)], torn=True)
    write_tree(captain / "system/b/s.jsonl", [message("2027-01-15", cache_read=50)])
    write_tree(captain / "turns/c/t.jsonl", [message("2027-01-15", cache_write=3)])
    write_tree(captain / "lanes/x.jsonl", [message("2027-01-15", input=1000)])  # a lane log, not a tree
    assert spend.of_directory(captain / "rooms/a") == Tokens(input=5, output=10)
    assert spend.of_day(captain, "2027-01-15") == Tokens(input=1, cache_read=50, cache_write=3, output=2)
    assert spend.of_directory(tmp_path / "nowhere") == Tokens()
