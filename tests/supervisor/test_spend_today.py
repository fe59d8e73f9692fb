"""The day's tokens for `status`, counted once a line: the same totals as reading every tree, without re-reading."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from clankie import spend
from clankie.protocol import Tokens
from supervisor import spend_today
from supervisor.spend_today import SpendToday
from tests.clankie.test_spend import message, write_tree

DAY = "2027-01-15"


def _append(path: Path, *entries: dict[str, Any], torn: str = "") -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write("".join(json.dumps(e) + "\n" for e in entries) + torn)


def test_lines_written_since_the_last_call_are_added_and_a_torn_line_waits_for_its_end(tmp_path: Path) -> None:
    """A call counts what was appended since the one before; half a line counts once its newline is written."""
    captain = tmp_path / "captain"
    live = captain / "rooms/a/20270115T100000Z_1.jsonl"
    write_tree(live, [message(DAY, input=1, output=2)])
    tally = SpendToday(captain)
    assert tally.of_day(DAY) == Tokens(input=1, output=2)
    line = json.dumps(message(DAY, input=10, cache_read=5))
    _append(live, message(DAY, output=7), torn=line[:20])
    assert tally.of_day(DAY) == Tokens(input=1, output=9)
    with live.open("a", encoding="utf-8") as f:
        f.write(line[20:] + "\n")
    assert tally.of_day(DAY) == Tokens(input=11, cache_read=5, output=9)
    assert tally.of_day(DAY) == spend.of_day(captain, DAY)


def test_a_new_tree_finishes_the_one_before_and_trees_that_ended_before_the_day_are_never_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lane's older tree is counted to its end when a newer one appears; trees whose successor began before the day
    hold none of its entries and are not read; rooms, system lanes and one-shots all count."""
    opened: list[str] = []
    read = spend_today._read

    def counting(path: str, lane: Any, day: str) -> None:
        opened.append(Path(path).name)
        read(path, lane, day)

    monkeypatch.setattr(spend_today, "_read", counting)
    captain = tmp_path / "captain"
    lane = captain / "rooms/a"
    write_tree(lane / "20270113T000000Z_0.jsonl", [message("2027-01-13", input=999)])
    write_tree(lane / "20270114T230000Z_1.jsonl", [message("2027-01-14", input=500), message(DAY, input=1)])
    write_tree(captain / "turns/b/20270115T080000Z_2.jsonl", [message(DAY, output=4)])
    tally = SpendToday(captain)
    assert tally.of_day(DAY) == Tokens(input=1, output=4)
    _append(lane / "20270114T230000Z_1.jsonl", message(DAY, input=2))  # the last words of the old tree
    write_tree(lane / "20270115T120000Z_3.jsonl", [message(DAY, cache_write=30)])
    assert tally.of_day(DAY) == Tokens(input=3, cache_write=30, output=4)
    assert tally.lanes == 2
    assert "20270113T000000Z_0.jsonl" not in opened


def test_a_rewritten_tree_is_counted_again_a_removed_lane_forgotten_and_a_new_day_starts_from_nothing(tmp_path: Path) -> None:
    """A tree replaced under the same name is read from its start; a lane directory removed leaves the tally; the next
    day counts only its own entries."""
    captain = tmp_path / "captain"
    tree = captain / "rooms/a/20270115T100000Z_1.jsonl"
    write_tree(tree, [message(DAY, input=5), message(DAY, input=5)])
    write_tree(captain / "rooms/b/20270115T100000Z_2.jsonl", [message(DAY, output=1)])
    tally = SpendToday(captain)
    assert tally.of_day(DAY) == Tokens(input=10, output=1)
    replacement = tree.with_suffix(".new")
    write_tree(replacement, [message(DAY, input=3)])
    replacement.replace(tree)
    assert tally.of_day(DAY) == Tokens(input=3, output=1)
    shutil.rmtree(captain / "rooms/b")
    assert tally.of_day(DAY) == Tokens(input=3)
    assert tally.lanes == 1
    _append(tree, message("2027-01-16", output=8))
    assert tally.of_day("2027-01-16") == Tokens(output=8)


def test_a_burst_larger_than_one_read_is_counted_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What was written since the last call is read a chunk at a time (a line cut by a chunk joins the next)."""
    monkeypatch.setattr(spend_today, "CHUNK", 64)
    captain = tmp_path / "captain"
    write_tree(captain / "rooms/a/20270115T100000Z_1.jsonl", [message(DAY, input=1) for _ in range(40)])
    assert SpendToday(captain).of_day(DAY) == Tokens(input=40)
