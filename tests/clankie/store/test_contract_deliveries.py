"""The service's delivery records, one contract run against both adapters (files: the delivery log under
``<state>/captain/deliveries/``; postgres: a row per delivery id, each write fenced by its room's shard's lease).

What it promises, through the service's own shell (:class:`~service.captain.deliveries.store.DeliveryStore`) and
rule (:func:`~service.captain.deliveries.store.reckon`): every field of a record (fingerprint, accepted_at, result,
run, crashed_runs, tree) comes back to a new process exactly as written; a settled delivery is answered with its
result and the same id with another body is a conflict; only a run that died in the reading process's tree is
charged, and ``poison_runs`` of them make a poison message; a stop charges nobody; settled records go once older than
the retention, unsettled ones never by age; and at ``CLANKIE_DELIVERY_MAX_RETAINED`` the oldest settled records are
forgotten first, never one this process is running. In PostgreSQL a record one tree settled is the answer another
tree reads, and a tree that lost the shard writes nothing (refused, counted)."""

from __future__ import annotations

import logging
from pathlib import Path

import psycopg
import pytest

from clankie.protocol import TurnResult
from clankie.store.delivery_ports import DeliveryRefused
from clankie.testing.clock import FakeClock
from service.captain.deliveries.store import (
    Answer,
    Conflict,
    DeliveryStore,
    Poison,
    Retained,
    RunIt,
    reckon,
)
from tests.clankie.store.backends import RETENTION, Backend, FilesBackend, PostgresBackend

FP = "a" * 64
OTHER_FP = "b" * 64
TREE = "tree-1"  # the supervised tree of the processes below, unless one says otherwise
SETTLED = TurnResult.settled("the door code is 4711 ✓ — «quoted»", turn_id="turn-1-d1")
ROOM_SHARD = (0, 2)


@pytest.fixture(params=["files", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "files":
        return FilesBackend(tmp_path)
    return PostgresBackend(request.getfixturevalue("postgres_dsn"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def turn(store: DeliveryStore, did: str, run: str, result: TurnResult | None = SETTLED, fp: str = FP) -> None:
    """One delivery accepted, in run ``run``, and settled with ``result`` (None: the process dies mid-run)."""
    store.accept(did, fp, shard=ROOM_SHARD)
    store.join(run, [did])
    if result is not None:
        store.settle(did, result)


def test_every_field_of_a_record_comes_back_to_a_new_process(backend: Backend, clock: FakeClock) -> None:
    """Accepted, joined, settled: each stage reads back whole in a new process; the result's text exactly."""
    with backend.deliveries(clock, tree=TREE) as store:
        store.accept("d1", FP, ("r0",), shard=ROOM_SHARD)
        accepted_at = clock.wall()
        with backend.deliveries(clock, tree=TREE) as reader:
            assert reader.load("d1") == Retained("d1", FP, accepted_at, None, None, ("r0",), None)
        clock.advance(5)
        store.join("r1", ["d1"])
        with backend.deliveries(clock, tree=TREE) as reader:
            assert reader.load("d1") == Retained("d1", FP, accepted_at, None, "r1", ("r0",), TREE)
        store.settle("d1", SETTLED)
    with backend.deliveries(clock, tree=TREE) as again:
        loaded = again.load("d1")
        assert loaded == Retained("d1", FP, accepted_at, SETTLED, None, ("r0",), None)
        assert loaded is not None and loaded.result is not None and loaded.result.text == SETTLED.text
        assert again.load("never") is None


def test_a_settled_delivery_is_answered_and_another_body_is_a_conflict(backend: Backend, clock: FakeClock) -> None:
    """The same id and body: its result, whoever asks; the same id with another body: a conflict."""
    with backend.deliveries(clock, tree=TREE) as store:
        turn(store, "d1", "r1")
    with backend.deliveries(clock, tree="tree-2") as other:
        assert reckon(other.load("d1"), FP, 3, tree=other.tree) == Answer(SETTLED)
        assert reckon(other.load("d1"), OTHER_FP, 3, tree=other.tree) == Conflict()


def test_only_a_run_that_died_in_this_tree_is_charged_and_enough_of_them_are_poison(backend: Backend,
                                                                                     clock: FakeClock) -> None:
    """The process dies mid-run twice in one tree (its supervisor saw both): each death adds that run, the second
    makes a poison message at ``poison_runs`` = 2. A run that died with its whole tree charges nothing."""
    with backend.deliveries(clock, tree="tree-0") as first:
        turn(first, "d1", "r0", result=None)  # the whole tree died: charges nobody
    with backend.deliveries(clock, tree=TREE) as second:
        decision = reckon(second.load("d1"), FP, 2, tree=TREE)
        assert decision == RunIt(())
        second.accept("d1", FP, decision.crashed_runs, shard=ROOM_SHARD)
        second.join("r1", ["d1"])  # the service alone dies in this run
    with backend.deliveries(clock, tree=TREE) as third:
        decision = reckon(third.load("d1"), FP, 2, tree=TREE)
        assert decision == RunIt(("r1",))
        third.accept("d1", FP, decision.crashed_runs, shard=ROOM_SHARD)
        third.join("r2", ["d1"])
    with backend.deliveries(clock, tree=TREE) as fourth:
        assert reckon(fourth.load("d1"), FP, 2, tree=TREE) == Poison(("r1", "r2"))
        assert reckon(fourth.load("d1"), FP, 3, tree=TREE) == RunIt(("r1", "r2"))
        assert reckon(fourth.load("d1"), FP, 2, tree="tree-9") == RunIt(("r1",))  # another tree: r2 is not its crash


def test_a_stop_charges_nobody(backend: Backend, clock: FakeClock) -> None:
    """A stop forgets every run as it begins: a kill during it charges no one; a turn that still settles keeps its
    result."""
    with backend.deliveries(clock, tree=TREE) as store:
        store.accept("d1", FP, shard=ROOM_SHARD)
        store.accept("d2", FP, shard=ROOM_SHARD)
        store.join("r1", ["d1", "d2"])
        store.release_all()
        store.join("r2", ["d2"])  # after the stop began: not recorded
        with backend.deliveries(clock, tree=TREE) as reader:
            assert [reckon(reader.load(d), FP, 1, tree=TREE) for d in ("d1", "d2")] == [RunIt(()), RunIt(())]
        store.settle("d2", SETTLED)
    with backend.deliveries(clock, tree=TREE) as again:
        assert reckon(again.load("d2"), FP, 1, tree=TREE) == Answer(SETTLED)


def test_settled_records_go_past_the_retention_and_unsettled_ones_never_by_age(backend: Backend,
                                                                               clock: FakeClock) -> None:
    """At the retention a settled record is still answered; a second later it is unknown (re-submitted, it runs as
    new) and the next write forgets it; an unsettled record of any age is kept, its crashed runs still counted."""
    with backend.deliveries(clock, tree=TREE) as store:
        turn(store, "d1", "r1")
        turn(store, "d2", "r2", result=None)  # its process died mid-run
    clock.advance(RETENTION)
    with backend.deliveries(clock, tree=TREE) as store:
        assert reckon(store.load("d1"), FP, 3, tree=TREE) == Answer(SETTLED)  # at the bound: kept
        clock.advance(1)
        assert store.load("d1") is None
        assert reckon(store.load("d2"), FP, 3, tree=TREE) == RunIt(("r2",))
        assert store.prune() == 1  # d1 is gone from the store, not only hidden
        turn(store, "d3", "r3")
    with backend.deliveries(clock, tree=TREE) as again:
        assert [again.load(d) is not None for d in ("d1", "d2", "d3")] == [False, True, True]


def test_at_the_bound_the_oldest_settled_records_are_forgotten_first(backend: Backend, clock: FakeClock,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """With ``max_retained`` = 3, three records are all kept; a fourth forgets the oldest settled one, not an older
    one this process is running; with nothing settled left, none this process is running goes either. A forgotten
    delivery re-submitted runs again as new."""
    with backend.deliveries(clock, tree=TREE, max_retained=3) as store:
        turn(store, "d1", "r1")
        clock.advance(1)
        store.accept("d2", FP, shard=ROOM_SHARD)  # running here
        clock.advance(1)
        turn(store, "d3", "r3")
        clock.advance(1)
        assert [store.load(d) is not None for d in ("d1", "d2", "d3")] == [True, True, True]  # at the bound
        with caplog.at_level(logging.WARNING):
            store.accept("d4", FP, shard=ROOM_SHARD)
        assert [store.load(d) is not None for d in ("d1", "d2", "d3", "d4")] == [False, True, True, True]
        assert "delivery records at the cap of 3" in caplog.text
        clock.advance(1)
        store.accept("d5", FP, shard=ROOM_SHARD)
        assert [store.load(d) is not None for d in ("d2", "d3", "d4", "d5")] == [True, False, True, True]
        clock.advance(1)
        store.accept("d6", FP, shard=ROOM_SHARD)  # every record left is running here: none can go
        assert [store.load(d) is not None for d in ("d2", "d4", "d5", "d6")] == [True, True, True, True]
        assert reckon(store.load("d1"), FP, 3, tree=TREE) == RunIt(())


def test_at_the_bound_records_a_dead_process_left_open_go_after_the_settled_ones(backend: Backend,
                                                                                  clock: FakeClock) -> None:
    """Unsettled records of an earlier process are forgotten, oldest first, once no settled record is left."""
    with backend.deliveries(clock, tree=TREE) as first:
        for did, result in (("d1", None), ("d2", SETTLED), ("d3", None)):
            turn(first, did, "r1", result=result)
            clock.advance(1)
    with backend.deliveries(clock, tree=TREE, max_retained=3) as second:
        second.accept("d4", FP, shard=ROOM_SHARD)
        assert [second.load(d) is not None for d in ("d1", "d2", "d3", "d4")] == [True, False, True, True]
        clock.advance(1)
        second.accept("d5", FP, shard=ROOM_SHARD)
        assert [second.load(d) is not None for d in ("d1", "d3", "d4", "d5")] == [False, True, True, True]


def test_in_postgres_a_tree_that_lost_the_shard_writes_no_record(postgres_dsn: str) -> None:
    """Another tree took shard 0/2: the old holder's settle of a delivery on it is refused and counted and nothing is
    written (the new holder still finds it unsettled, and runs it); a delivery on its other shard is written. A shard
    the tree never held is refused before the database."""
    clock = FakeClock()
    backend = PostgresBackend(postgres_dsn)
    with backend.deliveries(clock, tree=TREE) as store:
        store.accept("d1", FP, shard=(0, 2))
        store.join("r1", ["d1"])
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute("UPDATE clankie_shard_lease SET holder = 'tree-b', epoch = epoch + 1, "
                         "expires_at = now() + interval '10 minutes' WHERE shard = '0/2'")
        with pytest.raises(DeliveryRefused) as refused:
            store.settle("d1", SETTLED)
        assert refused.value.code == "stale_epoch"
        with pytest.raises(DeliveryRefused) as moved:
            store.accept("d2", FP, shard=(0, 2))
        assert moved.value.code == "stale_epoch"
        assert backend.delivery_records is not None and backend.delivery_records.stale_writes == 2
        store.accept("d3", FP, shard=(1, 2))
        with pytest.raises(DeliveryRefused) as never:
            store.accept("d4", FP, shard=(2, 3))
        assert never.value.code == "not_held"
        reader = store.load("d1")
        assert reader is not None and reader.result is None and reader.run == "r1"
        assert store.load("d2") is None and store.load("d3") is not None
    with psycopg.connect(postgres_dsn) as conn:
        rows = conn.execute("SELECT delivery_id, shard, written_epoch FROM clankie_delivery ORDER BY delivery_id").fetchall()
        count = conn.execute("SELECT n FROM clankie_delivery_count").fetchone()
    assert [(r[0], r[1]) for r in rows] == [("d1", "0/2"), ("d3", "1/2")]
    assert count == (2,)


def test_in_postgres_the_count_the_bound_reads_stays_exact(postgres_dsn: str) -> None:
    """The bound reads the table's count from the row the writes keep, never by counting the table: after 300 turns
    (accepted, joined, settled: 900 writes) and an expiry of half of them, that row says what the table holds."""
    clock = FakeClock()
    backend = PostgresBackend(postgres_dsn)
    with backend.deliveries(clock, tree=TREE) as store:
        for n in range(300):
            turn(store, f"m{n}", f"r{n}")
            clock.advance(RETENTION / 300 if n == 149 else 0.001)
        clock.advance(RETENTION - 1)  # the first 150 are past the retention, the last 150 not
        assert store.prune() == 150
        assert backend.delivery_records is not None and backend.delivery_records.count == 150
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute("SELECT count(*), (SELECT n FROM clankie_delivery_count) FROM clankie_delivery").fetchone() == (150, 150)
