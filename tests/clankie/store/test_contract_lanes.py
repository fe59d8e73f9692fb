"""A lane's session tree, one contract run against both adapters (files: ``<state>/captain/rooms/<quoted key>/``;
postgres: a fenced row per segment and per record). What it promises: a tree written is read back equal after a
restart; entries keep the order they were appended in; a continuation names the segment it continues; a run that
never ended is cut when the lane reopens; a segment without a header is set aside and the lane starts cold; the lane
keeps at most ``max_files`` segments (the retention bound), never its current one; lanes never mix. In PostgreSQL, a
tree that lost the shard writes nothing: its late appends are refused and counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from clankie.store.lane_ports import LaneTreeStore
from clankie.store.lanes_pg import PgLaneTrees
from clankie.store.leases import Fence, NotHeld, StaleEpoch
from clankie.testing.clock import FakeClock
from service.agent.retention import DAY, Retention
from service.agent.session import SessionTree
from service.captain.lanes.keys import quoted
from tests.clankie.store.backends import Backend, FilesBackend, PostgresBackend

LANE = "discord:clankie:discord:1180000000000000000:1180000000000000001"
OTHER = "discord:clankie:discord:dm:1180000000000000009"
SHARD = (0, 1)


@pytest.fixture(params=["files", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "files":
        return FilesBackend(tmp_path)
    return PostgresBackend(request.getfixturevalue("postgres_dsn"))


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def _texts(tree: SessionTree) -> list[str]:
    return [e["message"]["content"][0]["text"] for e in tree.path_to_leaf() if e["type"] == "message"]


def test_a_tree_written_is_read_back_equal_after_a_restart(backend: Backend) -> None:
    """Header, entries (every field, a NUL and non-ASCII text included), the model and the messages the model sees
    come back the same from a new store: what a lane reads at its start is what it wrote."""
    clock = FakeClock()
    with backend.lanes() as lanes:
        tree = SessionTree.create(lanes(LANE, SHARD), clock)
        tree.append_message(_user("the door code is 4711"))
        tree.append_model_change("claude-test")
        tree.append_message({"role": "assistant", "content": [{"type": "text", "text": "noted \u0000 ✓ 🦀"}]},
                            usage={"input": 12, "output": 3}, stop_reason="end_turn")
        tree.append_custom("run_end", {"outcome": "ok", "ratio": 0.1})
        tree.close()
    with backend.lanes() as lanes:
        again = SessionTree.open_latest(lanes(LANE, SHARD), clock)
    assert again.name == tree.name and again.header == tree.header
    assert again.entries == tree.entries and again.leaf_id == tree.leaf_id
    assert again.last_model() == "claude-test" and again.messages() == tree.messages()


def test_appends_keep_their_order(backend: Backend) -> None:
    """The store returns a segment's records in the order they were appended, the header first."""
    with backend.lanes() as lanes:
        store = lanes(LANE, SHARD)
        store.create("20270115T120000000000Z_0000abcd.jsonl", {"type": "session", "id": "s"})
        for n in range(40):
            store.append("20270115T120000000000Z_0000abcd.jsonl", {"type": "custom", "id": f"e{n}", "n": n})
    with backend.lanes() as lanes:
        records = lanes(LANE, SHARD).read("20270115T120000000000Z_0000abcd.jsonl")
    assert records[0] == {"type": "session", "id": "s"}
    assert [r["n"] for r in records[1:]] == list(range(40))


def test_a_continuation_starts_a_segment_naming_the_one_it_continues(backend: Backend) -> None:
    """After a compaction the lane reopens on the new segment: its header names the old one, the kept tail is
    there without ``usage`` (spend counted once), and the old segment is still kept."""
    clock = FakeClock()
    with backend.lanes() as lanes:
        tree = SessionTree.create(lanes(LANE, SHARD), clock)
        tree.append_message(_user("old"))
        kept = tree.append_message({"role": "assistant", "content": [{"type": "text", "text": "kept"}]}, usage={"input": 5})
        first = tree.name
        clock.advance(60)
        tree.continue_with(summary="they said old", first_kept_id=kept["id"], tokens_before=100)
        tree.append_message(_user("new"))
        tree.close()
    with backend.lanes() as lanes:
        store = lanes(LANE, SHARD)
        again = SessionTree.open_latest(store, clock)
        assert sorted(store.names()) == [first, again.name]
    assert again.name > first and again.previous == first
    assert _texts(again) == ["kept", "new"]
    assert "usage" not in again.entries[0]


def test_a_run_that_never_ended_is_cut_when_the_lane_reopens(backend: Backend) -> None:
    """Messages after the last ``run_end`` belong to a run whose process died: the reopened lane no longer carries
    them, and the cut itself is in the store."""
    clock = FakeClock()
    with backend.lanes() as lanes:
        tree = SessionTree.create(lanes(LANE, SHARD), clock)
        tree.append_message(_user("answered"))
        tree.append_custom("run_end", {"outcome": "ok"})
        tree.append_message(_user("the process died during this"))
    with backend.lanes() as lanes:
        reopened = SessionTree.open_latest(lanes(LANE, SHARD), clock)
        assert reopened.drop_unfinished() == 1
    with backend.lanes() as lanes:
        again = SessionTree.open_latest(lanes(LANE, SHARD), clock)
    assert _texts(again) == ["answered"]
    assert again.entries[-1]["custom_type"] == "cut"


def test_a_segment_without_a_header_is_set_aside_and_the_lane_starts_cold(backend: Backend) -> None:
    """The newest segment has no header (a continuation written by hand, a bad restore): it is kept aside under a
    name that is never current, and the lane starts a new, empty segment rather than failing."""
    clock = FakeClock()
    bad = "20270115T120000000000Z_0000dead.jsonl"  # newer than the first segment (the clock starts at 08:16)
    with backend.lanes() as lanes:
        good = SessionTree.create(lanes(LANE, SHARD), clock)
        good.append_message(_user("before"))
        lanes(LANE, SHARD).write_whole(bad, [{"type": "message", "id": "x", "message": _user("orphan")}])
    with backend.lanes() as lanes:
        store = lanes(LANE, SHARD)
        tree = SessionTree.open_latest(store, clock)
        assert tree.entries == [] and tree.name not in (good.name, bad)
        assert sorted(store.names()) == sorted([good.name, bad + ".broken", tree.name])
        assert store.newest() == tree.name


def _segments(tree: SessionTree, clock: FakeClock, count: int) -> list[str]:
    """``count`` continuations of ``tree``, a minute apart; the names of the segments, oldest first."""
    names = [tree.name]
    for n in range(count):
        clock.advance(60)
        entry = tree.append_message(_user(f"turn {n}"))
        tree.continue_with(summary=f"up to {n}", first_kept_id=entry["id"], tokens_before=10)
        names.append(tree.name)
    return names


def test_a_lane_keeps_exactly_max_files_segments_at_the_bound(backend: Backend) -> None:
    """The tree's bound is the retention's ``max_files``: at the bound nothing goes; one continuation past it, the
    oldest segment goes and the current one stays."""
    clock = FakeClock()
    bound = Retention(max_age_seconds=3650 * DAY, max_files=3)
    with backend.lanes() as lanes:
        store = lanes(LANE, SHARD)
        tree = SessionTree.create(store, clock, bound)
        names = _segments(tree, clock, 2)
        assert sorted(store.names()) == names  # three: at the bound
        names += _segments(tree, clock, 1)[1:]
        assert sorted(store.names()) == names[1:]
        assert store.newest() == tree.name == names[-1]


def test_old_segments_go_by_age_but_never_the_current_one(backend: Backend) -> None:
    """A segment that stopped being written more than ``max_age_seconds`` ago goes; the current one stays."""
    clock = FakeClock()
    month = Retention(max_age_seconds=30 * DAY, max_files=50)
    with backend.lanes() as lanes:
        store = lanes(LANE, SHARD)
        tree = SessionTree.create(store, clock, month)
        names = _segments(tree, clock, 1)
        clock.advance(31 * DAY)
        assert tree.prune() == [names[0]]
        assert store.names() == [tree.name]


def test_lanes_keep_their_own_trees(backend: Backend) -> None:
    """Two rooms' lanes in one store never see each other's entries."""
    clock = FakeClock()
    with backend.lanes() as lanes:
        one = SessionTree.create(lanes(LANE, SHARD), clock)
        one.append_message(_user("for the guild room"))
        two = SessionTree.create(lanes(OTHER, SHARD), clock)
        two.append_message(_user("for the direct message"))
    with backend.lanes() as lanes:
        assert _texts(SessionTree.open_latest(lanes(LANE, SHARD), clock)) == ["for the guild room"]
        assert _texts(SessionTree.open_latest(lanes(OTHER, SHARD), clock)) == ["for the direct message"]


def test_the_file_adapter_writes_the_files_the_captain_reads_today(tmp_path: Path) -> None:
    """Same place, same format: ``<state>/captain/rooms/<quoted key>/<stamp>Z_<id8>.jsonl``, a header line then
    one line per entry."""
    clock = FakeClock()
    with FilesBackend(tmp_path).lanes() as lanes:
        tree = SessionTree.create(lanes(LANE, SHARD), clock)
        tree.append_message(_user("hello"))
    path = tmp_path / "captain" / "rooms" / quoted(LANE) / tree.name
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert tree.path == path
    assert lines[0]["type"] == "session" and lines[1]["message"] == _user("hello")


def _take_over(dsn: str, backend: PostgresBackend) -> Fence:
    """Another tree takes shard 0/1 from the backend's tree: its new fence."""
    old = backend.fences["0/1"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE clankie_shard_lease SET expires_at = now() WHERE shard = '0/1'")  # the old lease ran out
        row = conn.execute("UPDATE clankie_shard_lease SET holder = 'tree-b', epoch = epoch + 1, "
                           "expires_at = now() + interval '10 minutes' WHERE shard = '0/1' RETURNING epoch").fetchone()
    assert row is not None and int(str(row[0])) == old.epoch + 1
    return Fence("0/1", "tree-b", old.epoch + 1)


def test_in_postgres_a_tree_that_lost_the_shard_appends_nothing(postgres_dsn: str) -> None:
    """The old holder, woken after another tree took the shard, has every write refused and counted; the new
    holder reads everything written before the takeover and goes on; a shard never held is refused before the
    database and not counted."""
    backend = PostgresBackend(postgres_dsn)
    clock = FakeClock()
    with backend.lanes() as lanes:
        trees = backend.lane_trees
        assert isinstance(trees, PgLaneTrees)
        old = SessionTree.create(lanes(LANE, SHARD), clock)
        old.append_message(_user("remember: the door code is 4711"))
        taker = PgLaneTrees(trees.pool, {"0/1": _take_over(postgres_dsn, backend)}.get)
        with pytest.raises(StaleEpoch):
            old.append_message(_user("a late word from the paused tree"))
        new = SessionTree.open_latest(taker.lane(LANE, SHARD), clock)
        assert _texts(new) == ["remember: the door code is 4711"]
        new.append_message(_user("the new holder's word"))
        assert trees.stale_writes == 1
        with pytest.raises(NotHeld):
            PgLaneTrees(trees.pool, lambda shard: None).lane(OTHER, SHARD).create("x.jsonl", {"type": "session"})
        assert trees.stale_writes == 1
    with backend.lanes() as lanes:
        store: LaneTreeStore = lanes(LANE, SHARD)
        assert [e["message"]["content"][0]["text"] for e in store.read(new.name)[1:]] == [
            "remember: the door code is 4711", "the new holder's word"]


def test_in_postgres_a_lease_that_ran_out_refuses_writes_though_nobody_took_it(postgres_dsn: str) -> None:
    """A paused holder is fenced, not trusted: once its lease expired on the database's clock, its append is
    refused even before another tree takes the shard."""
    backend = PostgresBackend(postgres_dsn)
    with backend.lanes() as lanes:
        store = lanes(LANE, SHARD)
        store.create("20270115T120000000000Z_0000abcd.jsonl", {"type": "session", "id": "s"})
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute("UPDATE clankie_shard_lease SET expires_at = now() WHERE shard = '0/1'")
        with pytest.raises(StaleEpoch):
            store.append("20270115T120000000000Z_0000abcd.jsonl", {"type": "custom", "id": "late"})
        assert backend.lane_trees is not None and backend.lane_trees.stale_writes == 1
        assert store.read("20270115T120000000000Z_0000abcd.jsonl") == [{"type": "session", "id": "s"}]
