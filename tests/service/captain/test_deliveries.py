"""Delivery records and the crashed-run rule: only runs a delivery was part of count against it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clankie.appender import DiskError
from clankie.protocol import TurnResult
from clankie.testing.clock import FakeClock
from service.captain.deliveries.record import legacy_name
from service.captain.deliveries.store import (
    RETENTION_SECONDS,
    Answer,
    Conflict,
    DeliveryStore,
    Poison,
    Retained,
    RunIt,
    reckon,
)
from tests.disk import writes_refused_past

FP = "f" * 64
TREE = "tree-1"  # the supervised tree every process of these tests belongs to, unless one says otherwise
SETTLED = TurnResult.settled("hi", turn_id="turn-1-d1")
FAILED = TurnResult.failed("captain_session_failed")


def record(*, run: str | None = None, crashed: tuple[str, ...] = (), result: TurnResult | None = None,
           tree: str | None = TREE) -> Retained:
    return Retained("d1", FP, 1_800_000_000.0, result, run, crashed, tree if run is not None else None)


def restart(store: DeliveryStore, clock: FakeClock, tree: str | None = TREE) -> DeliveryStore:
    """What a new service process sees: the same directory, nothing in memory (in the same tree unless told)."""
    return DeliveryStore(store.directory, clock, tree=tree)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> DeliveryStore:
    return DeliveryStore(tmp_path / "deliveries", clock, tree=TREE)


# ------------------------------------------------------------------- the pure rule


def test_a_new_delivery_runs_uncharged() -> None:
    """A delivery the disk has never seen runs with no crashed runs."""
    assert reckon(None, FP, 3, tree=TREE) == RunIt(())


def test_a_different_body_under_the_same_id_is_a_conflict() -> None:
    """The same delivery id with another fingerprint is a conflict, whatever the record holds."""
    assert reckon(record(run="r1"), "0" * 64, 3, tree=TREE) == Conflict()


def test_a_retained_result_is_the_answer_even_if_it_crashed_before() -> None:
    """A delivery with a result is answered with it; crashed runs no longer matter."""
    assert reckon(record(crashed=("r1", "r2", "r3"), result=SETTLED), FP, 3, tree=TREE) == Answer(SETTLED)


def test_a_delivery_that_never_joined_a_run_is_not_charged_for_the_crash() -> None:
    """Accepted, queued or held when the service died: no run named, so it runs again with nothing counted."""
    assert reckon(record(), FP, 1, tree=TREE) == RunIt(())
    assert reckon(record(crashed=("r1",)), FP, 3, tree=TREE) == RunIt(("r1",))


def test_the_run_a_record_still_names_counts_as_one_crashed_run() -> None:
    """A record that still names the run it joined and has no result: that run died with the service."""
    assert reckon(record(run="r2", crashed=("r1",)), FP, 3, tree=TREE) == RunIt(("r1", "r2"))


def test_poison_runs_distinct_crashed_runs_make_a_poison_message() -> None:
    """The Nth distinct crashed run fails the delivery; one fewer runs it again."""
    assert reckon(record(run="r3", crashed=("r1", "r2")), FP, 3, tree=TREE) == Poison(("r1", "r2", "r3"))
    assert reckon(record(run="r3", crashed=("r1", "r2")), FP, 4, tree=TREE) == RunIt(("r1", "r2", "r3"))
    assert reckon(record(run="r1"), FP, 1, tree=TREE) == Poison(("r1",))


def test_a_run_already_counted_is_not_counted_twice() -> None:
    """Run ids are a set: a record naming a run it already counted does not count it again."""
    assert reckon(record(run="r1", crashed=("r1",)), FP, 2, tree=TREE) == RunIt(("r1",))


def test_a_run_that_died_with_its_tree_is_not_the_message_s_fault() -> None:
    """A run named by a record from another tree (the supervisor died, or was restarted) charges nothing."""
    assert reckon(record(run="r1", tree="tree-0"), FP, 1, tree=TREE) == RunIt(())
    assert reckon(record(run="r3", crashed=("r1", "r2"), tree="tree-0"), FP, 3, tree=TREE) == RunIt(("r1", "r2"))


def test_a_run_no_supervisor_watched_is_never_charged() -> None:
    """No tree on the record (no supervisor then, or written before trees were named) or none now: nothing counts."""
    assert reckon(record(run="r1", tree=None), FP, 1, tree=TREE) == RunIt(())
    assert reckon(record(run="r1", tree=None), FP, 1, tree=None) == RunIt(())
    assert reckon(record(run="r1"), FP, 1, tree=None) == RunIt(())


# ------------------------------------------------------------------- the disk


def test_a_supervisor_kill_adds_to_no_poison_count(store: DeliveryStore, clock: FakeClock) -> None:
    """Runs that died with their tree, however many, leave the count where it was; a crash in the same tree adds one."""
    store.accept("d1", FP)
    store.join("r1", ["d1"])
    current = store
    for n in range(2, 6):  # four whole-tree restarts, each with the delivery in a live run
        current = restart(current, clock, tree=f"tree-{n}")
        decision = reckon(current.load("d1"), FP, 1, tree=current.tree)
        assert decision == RunIt(())
        current.accept("d1", FP, decision.crashed_runs)
        current.join(f"r{n}", ["d1"])
    crashed = restart(current, clock, tree=current.tree)  # the service alone died: its supervisor saw it
    assert reckon(crashed.load("d1"), FP, 1, tree=crashed.tree) == Poison(("r5",))


def test_a_stop_charges_nobody_even_if_it_is_finished_by_sigkill(store: DeliveryStore, clock: FakeClock) -> None:
    """From the moment a stop begins no run is named: a kill mid-stop in the same tree counts for no one."""
    store.accept("d1", FP, ("r0",))
    store.accept("d2", FP)
    store.join("r1", ["d1", "d2"])
    store.release_all()
    store.join("r2", ["d2"])  # a steer flushed while the stop aborts the run: not recorded
    again = restart(store, clock)  # SIGKILL after stop_timeout, the same supervisor
    assert [reckon(again.load(d), FP, 2, tree=TREE) for d in ("d1", "d2")] == [RunIt(("r0",)), RunIt(())]
    store.settle("d2", SETTLED)  # a turn that still finished during the stop keeps its result as usual
    assert reckon(restart(store, clock).load("d2"), FP, 2, tree=TREE) == Answer(SETTLED)


def test_accept_then_join_names_the_run_on_disk(store: DeliveryStore, clock: FakeClock) -> None:
    """Accepting records no run; joining writes the run id, readable by a new process."""
    store.accept("d1", FP)
    assert restart(store, clock).load("d1") == Retained("d1", FP, clock.wall(), None, None, ())
    store.join("r1", ["d1"])
    loaded = restart(store, clock).load("d1")
    assert loaded is not None and (loaded.run, loaded.tree) == ("r1", TREE) and loaded.crashed_so_far(TREE) == ("r1",)


def test_each_new_run_that_crashes_counts_again(store: DeliveryStore, clock: FakeClock) -> None:
    """Joined r1, crash; re-accepted, joined r2, crash; re-accepted, joined r3, crash: three crashed runs, poison at 3."""
    current = store
    for run in ("r1", "r2", "r3"):
        decision = reckon(current.load("d1"), FP, 3, tree=TREE)
        assert isinstance(decision, RunIt)
        current.accept("d1", FP, decision.crashed_runs)
        current.join(run, ["d1"])
        current = restart(current, clock)  # SIGKILL: nothing but the disk survives
    assert reckon(current.load("d1"), FP, 3, tree=TREE) == Poison(("r1", "r2", "r3"))


def test_restarts_while_only_accepted_never_add_up(store: DeliveryStore, clock: FakeClock) -> None:
    """A delivery re-accepted after every crash but never part of a run stays uncharged, however many crashes."""
    current = store
    for _ in range(5):
        decision = reckon(current.load("d1"), FP, 1, tree=TREE)
        assert decision == RunIt(())
        current.accept("d1", FP, decision.crashed_runs)
        current = restart(current, clock)
    assert reckon(current.load("d1"), FP, 1, tree=TREE) == RunIt(())


def test_join_writes_only_deliveries_accepted_here_and_batches_them(store: DeliveryStore, clock: FakeClock) -> None:
    """One join call names the run in every listed accepted delivery; unknown ids are ignored."""
    store.accept("d1", FP)
    store.accept("d2", FP)
    store.join("r1", ["d1", "d2", "never-accepted"])
    again = restart(store, clock)
    assert [again.load(d).run for d in ("d1", "d2")] == ["r1", "r1"]  # type: ignore[union-attr]  # the records exist: the test wrote them
    assert again.load("never-accepted") is None


def test_release_forgets_the_run_so_a_graceful_stop_charges_nobody(store: DeliveryStore, clock: FakeClock) -> None:
    """A delivery released after a graceful stop keeps its earlier crashed runs but not the run that was cut."""
    store.accept("d1", FP, ("r0",))
    store.join("r1", ["d1"])
    store.release("d1")
    loaded = restart(store, clock).load("d1")
    assert loaded is not None and loaded.run is None and loaded.result is None
    assert reckon(loaded, FP, 3, tree=TREE) == RunIt(("r0",))


def test_settle_keeps_the_crashed_runs_and_clears_the_run(store: DeliveryStore, clock: FakeClock) -> None:
    """A settled record holds its result and the runs it survived; it names no live run."""
    store.accept("d1", FP, ("r0",))
    store.join("r1", ["d1"])
    store.settle("d1", SETTLED)
    loaded = restart(store, clock).load("d1")
    assert loaded == Retained("d1", FP, clock.wall(), SETTLED, None, ("r0",))


def test_a_poison_delivery_is_settled_from_its_loaded_record(store: DeliveryStore, clock: FakeClock) -> None:
    """A delivery failed as poison without running is retained with its failure and every crashed run."""
    store.accept("d1", FP)
    store.join("r1", ["d1"])
    fresh = restart(store, clock)
    loaded = fresh.load("d1")
    decision = reckon(loaded, FP, 1, tree=TREE)
    assert isinstance(decision, Poison) and loaded is not None
    fresh.settle("d1", FAILED, Retained("d1", FP, loaded.accepted_at, None, loaded.run, decision.crashed_runs))
    assert reckon(restart(fresh, clock).load("d1"), FP, 1, tree=TREE) == Answer(FAILED)
    with pytest.raises(KeyError):
        fresh.settle("unknown", FAILED)


def test_a_record_from_before_run_counting_reads_as_never_joined(store: DeliveryStore, clock: FakeClock) -> None:
    """An old record (``attempts``, no ``run``) keeps its fingerprint and result and counts no crashed run."""
    path = store.directory / legacy_name("d1")
    path.write_text(json.dumps({"delivery_id": "d1", "fingerprint": FP, "accepted_at": clock.wall(), "attempts": 2, "result": None}))
    assert reckon(restart(store, clock).load("d1"), FP, 1, tree=TREE) == RunIt(())
    path.write_text(json.dumps({"delivery_id": "d1", "fingerprint": FP, "accepted_at": clock.wall(), "attempts": 1,
                                "result": SETTLED.to_wire()}))
    assert reckon(restart(store, clock).load("d1"), FP, 1, tree=TREE) == Answer(SETTLED)


def test_a_malformed_run_field_is_an_unreadable_record(store: DeliveryStore, clock: FakeClock) -> None:
    """A record whose run ids are not strings is treated as new, not trusted, in a segment or an old-format file."""
    bad = {"delivery_id": "d1", "fingerprint": FP, "accepted_at": clock.wall(), "run": 7, "crashed_runs": [], "result": None}
    (store.directory / "0.jsonl").write_text(json.dumps(bad) + "\n")
    assert restart(store, clock).load("d1") is None
    old_format = {**bad, "delivery_id": "d2", "run": None, "crashed_runs": [1]}
    (store.directory / legacy_name("d2")).write_text(json.dumps(old_format))
    assert restart(store, clock).load("d2") is None


def test_settled_records_expire_after_the_retention_and_an_unfinished_one_is_kept(
    store: DeliveryStore, clock: FakeClock
) -> None:
    """Seven hours after acceptance a settled record is gone; one whose delivery never finished stays, crashed runs and all."""
    store.accept("d1", FP)
    store.join("r1", ["d1"])
    store.accept("d2", FP)
    store.settle("d2", SETTLED)
    clock.advance(RETENTION_SECONDS + 1)
    assert store.load("d2") is None
    assert store.prune() == 1 and store.log.get("d2") is None
    assert store.load("d1") == Retained("d1", FP, clock.wall() - RETENTION_SECONDS - 1, None, "r1", (), TREE)
    again = restart(store, clock)  # what a restart sees: the unfinished one, its crashed run counted
    assert again.load("d2") is None and again.prune() == 1  # it read the settled one, and counts it gone
    loaded = again.load("d1")
    assert loaded is not None and loaded.crashed_so_far(TREE) == ("r1",)


def test_a_join_that_cannot_be_written_is_logged_not_raised(
    store: DeliveryStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The turn goes on when its join cannot be recorded; the log names the run and a count, no content."""
    store.accept("d1", FP)
    with writes_refused_past(_segment_size(store) + 10), caplog.at_level("ERROR"):
        store.join("r1", ["d1"])
    assert "could not record 1 deliveries joining run r1: disk_efbig" in caplog.text
    assert restart(store, clock).load("d1") == Retained("d1", FP, clock.wall(), None, None, ())


def test_a_release_that_cannot_be_written_is_logged_not_raised(
    store: DeliveryStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A graceful stop goes on when the cut run cannot be cleared from a record; the log says which run."""
    store.accept("d1", FP)
    store.join("r1", ["d1"])
    with writes_refused_past(_segment_size(store) + 10), caplog.at_level("ERROR"):
        store.release("d1")
    assert "could not release delivery d1 from run r1: disk_efbig" in caplog.text
    assert restart(store, clock).load("d1").run == "r1"  # type: ignore[union-attr]  # counted if the stop never ends


def test_a_refused_accept_raises_and_leaves_no_torn_line(store: DeliveryStore, clock: FakeClock) -> None:
    """An accept the disk refuses raises DiskError, leaves the segment as it was, and writes resume once room returns."""
    store.accept("d1", FP)
    size = _segment_size(store)
    with writes_refused_past(size + 10), pytest.raises(DiskError) as refused:
        store.accept("d2", FP)
    assert refused.value.code == "disk_efbig" and _segment_size(store) == size
    assert store.load("d2") is None and restart(store, clock).load("d2") is None
    store.accept("d2", FP)
    assert [restart(store, clock).load(d) is not None for d in ("d1", "d2")] == [True, True]


def _segment_size(store: DeliveryStore) -> int:
    return store.log.segments()[-1].stat().st_size
