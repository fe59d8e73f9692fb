"""The spend ledger, one contract run against both adapters (files: ``<state>/captain/spend/<day>.jsonl``;
postgres: a row per line, a line about a room fenced by its shard's lease). What it promises: a day's spend per
room and per person adds up the same whichever store kept it; a restart reads today's totals back, raises, resets
and notices applied in order; days stay apart and the ledger keeps exactly ``keep_days`` of them. In PostgreSQL a
tree that lost a room's shard writes none of that room's spend (refused, counted); an operator's move belongs to no
shard and is written. And the default profile never loads the driver for any of it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from clankie.store.leases import StaleEpoch
from service.captain.spend.budget import TREE, Amount, DayBudgets, Scope
from service.captain.spend.ledger import Ledger
from tests.clankie.store.backends import Backend, FilesBackend, PostgresBackend

DAY = "2027-01-15"
ROOM = "room:1180000000000000000/1180000000000000001"
DM = "room:dm/1180000000000000009"
ALICE = "user:1180000000000000042"
BOB = "user:1180000000000000043"
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(params=["files", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "files":
        return FilesBackend(tmp_path)
    return PostgresBackend(request.getfixturevalue("postgres_dsn"))


def _budgets() -> DayBudgets:
    return DayBudgets({Scope.TREE: Amount(tokens=1_000_000), Scope.ROOM: Amount(tokens=10_000)}, day=DAY)


def _spent(budgets: DayBudgets, key: str) -> tuple[int, float]:
    """Tokens and dollars ``key`` spent today, the dollars to the nano-dollar (sums of floats differ in the last bit)."""
    used = budgets.used(key)
    return used.tokens, round(used.usd, 9)


def _call(at: float, keys: list[str], tokens: int, usd: float) -> dict[str, object]:
    return {"at": at, "kind": "call", "lane": "discord:clankie:discord:1:2", "keys": keys, "tokens": tokens, "usd": usd}


CALLS = [
    (_call(1.0, [TREE, ROOM, ALICE], 1200, 0.0125), (0, 2)),
    (_call(2.0, [TREE, ROOM, BOB], 800, 0.0075), (0, 2)),
    (_call(3.0, [TREE, DM, ALICE], 300, 0.003), (0, 2)),  # a direct message is on shard 0
    (_call(4.0, [TREE, ROOM, ALICE], 50, 0.0005), (0, 2)),
]


def test_a_days_spend_per_room_and_person_adds_up_the_same_in_either_store(backend: Backend) -> None:
    """The same calls give the same totals per key: the tree, each room, each person."""
    with backend.spend() as store:
        ledger = Ledger(store, keep_days=8)
        for record, shard in CALLS:
            ledger.append(DAY, record, shard)
        budgets = _budgets()
        read = ledger.replay(DAY, budgets)
    assert read.lines == 4
    assert _spent(budgets, TREE) == (2350, 0.0235)
    assert _spent(budgets, ROOM) == (2050, 0.0205)
    assert _spent(budgets, DM) == (300, 0.003)
    assert _spent(budgets, ALICE) == (1550, 0.016)
    assert _spent(budgets, BOB) == (800, 0.0075)


def test_a_restart_reads_todays_totals_back_with_raises_resets_and_notices_in_order(backend: Backend) -> None:
    """A new process with nothing but the store gets today's totals, the reset taking off what came before it,
    the raise and the notice."""
    with backend.spend() as store:
        ledger = Ledger(store, keep_days=8)
        ledger.append(DAY, _call(1.0, [TREE, ROOM], 150, 0.5), (0, 2))
        ledger.append(DAY, {"at": 2.0, "kind": "reset", "key": ROOM, "by": "operator"})
        ledger.append(DAY, _call(3.0, [TREE, ROOM], 20, 0.1), (0, 2))
        ledger.append(DAY, {"at": 4.0, "kind": "raise", "key": ROOM, "tokens": 50_000, "usd": 0.0})
        ledger.append(DAY, {"at": 5.0, "kind": "notice", "key": ROOM}, (0, 2))
    with backend.spend() as store:  # a new process: nothing but the store
        budgets = _budgets()
        read = Ledger(store, keep_days=8).replay(DAY, budgets)
    assert _spent(budgets, TREE) == (170, 0.6)
    assert _spent(budgets, ROOM) == (20, 0.1)
    assert budgets.limit(ROOM) == Amount(tokens=50_000) and read.notices == {ROOM: 5.0}


def test_days_stay_apart(backend: Backend) -> None:
    """Yesterday's spend is not today's: a day is replayed from its own lines only."""
    with backend.spend() as store:
        ledger = Ledger(store, keep_days=8)
        ledger.append("2027-01-14", _call(1.0, [TREE, ROOM], 999, 1.0), (0, 2))
        ledger.append(DAY, _call(2.0, [TREE, ROOM], 1, 0.001), (0, 2))
        budgets = _budgets()
        ledger.replay(DAY, budgets)
    assert _spent(budgets, ROOM) == (1, 0.001)


def test_the_ledger_keeps_exactly_keep_days_days(backend: Backend) -> None:
    """With ``keep_days`` = 2, today and yesterday stay (the bound) and every day before goes."""
    with backend.spend() as store:
        ledger = Ledger(store, keep_days=2)
        for day in ("2027-01-12", "2027-01-13", "2027-01-14", DAY):
            ledger.append(day, _call(1.0, [TREE], 10, 0.01), None)
        assert ledger.prune(DAY) == 2
        assert ledger.prune(DAY) == 0
        assert store.days() == ["2027-01-14", DAY]


def test_the_file_adapter_writes_the_files_the_service_reads_today(tmp_path: Path) -> None:
    """Same place, same format, same mode: ``<state>/captain/spend/<day>.jsonl``, 0600, one JSON line per line."""
    with FilesBackend(tmp_path).spend() as store:
        Ledger(store, keep_days=8).append(DAY, _call(1.0, [TREE], 10, 0.01), (0, 1))
    path = tmp_path / "captain" / "spend" / f"{DAY}.jsonl"
    assert path.stat().st_mode & 0o777 == 0o600
    assert Ledger(tmp_path / "captain" / "spend", keep_days=8).store.lines(DAY) == [_call(1.0, [TREE], 10, 0.01)]


def test_in_postgres_a_tree_that_lost_the_rooms_shard_writes_none_of_its_spend(postgres_dsn: str) -> None:
    """After another tree took shard 0/2, the old holder's line about a room on it is refused and counted (the
    ledger logs it and goes on), lines about its other shard and operator moves are written, and the new holder
    reads back only what was written under a live lease."""
    backend = PostgresBackend(postgres_dsn)
    with backend.spend() as store:
        ledger = Ledger(store, keep_days=8)
        ledger.append(DAY, _call(1.0, [TREE, ROOM], 100, 0.1), (0, 2))
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute("UPDATE clankie_shard_lease SET holder = 'tree-b', epoch = epoch + 1, "
                         "expires_at = now() + interval '10 minutes' WHERE shard = '0/2'")
        ledger.append(DAY, _call(2.0, [TREE, ROOM], 7777, 7.0), (0, 2))  # refused: never raised to the caller
        with pytest.raises(StaleEpoch):
            store.append(DAY, _call(3.0, [TREE, ROOM], 8888, 8.0), (0, 2))
        assert backend.spend_ledger is not None and backend.spend_ledger.stale_writes == 2
        ledger.append(DAY, _call(4.0, [TREE, "room:1180000000004194304/5"], 5, 0.005), (1, 2))
        ledger.append(DAY, {"at": 5.0, "kind": "raise", "key": ROOM, "tokens": 50_000, "usd": 0.0})
    with backend.spend() as store:
        budgets = _budgets()
        read = Ledger(store, keep_days=8).replay(DAY, budgets)
    assert read.lines == 3
    assert _spent(budgets, ROOM) == (100, 0.1) and _spent(budgets, TREE) == (105, 0.105)
    assert budgets.limit(ROOM) == Amount(tokens=50_000)


def test_the_files_profile_never_loads_the_driver() -> None:
    """The service, its session trees and its spend, as the default profile uses them, import no psycopg."""
    code = ("import sys; import service.app, service.agent.session, service.captain.spend.spending; "
            "print('psycopg' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"
