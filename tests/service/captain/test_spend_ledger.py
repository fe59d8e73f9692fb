"""The spend ledger: one file per UTC day, replayed in order, old days deleted, the session trees as a backstop."""

from __future__ import annotations

import json
from pathlib import Path

from clankie.pricing import PUBLISHED
from service.captain.spend.budget import TREE, Amount, DayBudgets, Scope
from service.captain.spend.ledger import Ledger, from_trees, rebuild, usd_of

DAY = "2027-01-15"


def fresh() -> DayBudgets:
    return DayBudgets({Scope.ROOM: Amount(tokens=100)}, day=DAY)


def test_a_day_is_replayed_in_order_with_raises_resets_and_notices(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "spend", keep_days=8)
    for line in (
        {"at": 1.0, "kind": "call", "keys": [TREE, "room:1/2"], "tokens": 150, "usd": 0.5},
        {"at": 2.0, "kind": "reset", "key": "room:1/2"},
        {"at": 3.0, "kind": "call", "keys": [TREE, "room:1/2"], "tokens": 20, "usd": 0.1},
        {"at": 4.0, "kind": "raise", "key": "room:1/2", "tokens": 1000, "usd": 0.0},
        {"at": 5.0, "kind": "notice", "key": "room:1/2"},
    ):
        ledger.append(DAY, line)
    with (tmp_path / "spend" / f"{DAY}.jsonl").open("a") as f:
        f.write('{"at": 6.0, "kind": "call", "keys": ["tree"], "tok')  # a torn last line is skipped
    budgets = fresh()
    read = ledger.replay(DAY, budgets)
    assert budgets.used(TREE) == Amount(170, 0.6)
    assert budgets.used("room:1/2").tokens == 20 and abs(budgets.used("room:1/2").usd - 0.1) < 1e-12
    assert budgets.limit("room:1/2") == Amount(tokens=1000) and read.notices == {"room:1/2": 5.0}
    assert (tmp_path / "spend" / f"{DAY}.jsonl").stat().st_mode & 0o777 == 0o600


def test_days_older_than_kept_are_deleted(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path, keep_days=2)
    for day in ("2027-01-12", "2027-01-13", "2027-01-14", "2027-01-15", "notes"):
        (tmp_path / f"{day}.jsonl").write_text("")
    assert ledger.prune(DAY) == 2
    assert sorted(p.stem for p in tmp_path.glob("*.jsonl")) == ["2027-01-14", "2027-01-15", "notes"]


def test_the_trees_make_good_a_short_ledger(tmp_path: Path) -> None:
    """Entries of the day count for the tree and for whom they were charged to; other days and entries without
    usage do not; each key ends at the larger of what the ledger and the trees say."""
    tree = tmp_path / "rooms" / "lane" / "20270115T000000000000Z_aaaaaaaa.jsonl"
    tree.parent.mkdir(parents=True)
    usage = {"input": 10, "output": 5, "cache_read": 100, "cache_write": 40, "cache_write_1h": 40}
    lines = [
        {"type": "session", "model": "claude-haiku-4-5"},
        {"type": "message", "timestamp": f"{DAY}T10:00:00.000+00:00", "usage": usage, "charged_to": ["room:1/2", "user:42"]},
        {"type": "message", "timestamp": f"{DAY}T11:00:00.000+00:00", "usage": usage},
        {"type": "message", "timestamp": "2027-01-14T23:59:59.000+00:00", "usage": usage, "charged_to": ["room:1/2"]},
        {"type": "message", "timestamp": f"{DAY}T12:00:00.000+00:00", "message": {"role": "user"}},
    ]
    tree.write_text("".join(json.dumps(line) + "\n" for line in lines))
    one = Amount(155, usd_of(PUBLISHED, "claude-haiku-4-5", usage))
    assert one.usd == (10 * 1.0 + 5 * 5.0 + 100 * 0.1 + 40 * 2.0) / 1e6
    totals = from_trees(tmp_path, DAY, PUBLISHED, "claude-sonnet-4-5")
    assert totals == {TREE: one + one, "room:1/2": one, "user:42": one}
    budgets = fresh()
    budgets.add("room:1/2", Amount(500, 0.0))
    rebuild(Ledger(tmp_path / "spend", 8), budgets, tmp_path, PUBLISHED, "claude-sonnet-4-5")
    assert budgets.used("room:1/2") == Amount(500, one.usd) and budgets.used(TREE) == one + one


def test_a_file_continued_before_the_day_is_not_read(tmp_path: Path) -> None:
    """Only the files a day can be in are read: a lane's file whose successor began the day before is skipped."""
    lane = tmp_path / "rooms" / "lane"
    lane.mkdir(parents=True)
    entry = {"type": "message", "timestamp": f"{DAY}T10:00:00.000+00:00", "usage": {"input": 7}}
    (lane / "20270113T000000000000Z_aaaaaaaa.jsonl").write_text(json.dumps(entry) + "\n")  # cannot hold the day
    (lane / "20270114T230000000000Z_bbbbbbbb.jsonl").write_text(json.dumps(entry) + "\n")  # the day's current file
    assert from_trees(tmp_path, DAY, PUBLISHED, "m")[TREE].tokens == 7
