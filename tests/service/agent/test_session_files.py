"""Session files: flat lane memory, compaction continues in a new file, a broken file moved aside, retention prunes."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pytest

from clankie import settings as settings_mod
from clankie.testing import fake_anthropic as fa
from clankie.testing.clock import FakeClock
from service.agent.agent import AgentConfig
from service.agent.compaction import SUMMARY_SYSTEM
from service.agent.outcome import OutcomeKind
from service.agent.retention import DAY, Retention, choose, prune
from service.agent.session import SessionTree
from service.agent.transcript import SUMMARY_PREFIX
from tests.fds import open_under
from tests.service.agent.helpers import arun, harness, user_texts
from tests.syncs import drain_syncs

TURN_TEXT = "y" * 400  # about 100 tokens a message


def _header(path: Path) -> dict[str, Any]:
    header: dict[str, Any] = json.loads(path.read_text().splitlines()[0])
    return header


def _summaries(body: dict[str, Any]) -> fa.Scenario | None:
    """Answer summary calls with a short summary; every other call gets the fake's echo."""
    system = body.get("system") or [{}]
    if isinstance(system, list) and system[0].get("text") == SUMMARY_SYSTEM:
        return fa.text("Goal: keep talking. Progress: many turns.")
    return None


def test_lane_memory_stays_flat_over_many_turns(tmp_path: Path) -> None:
    """300 turns through the real agent: the entries in memory stay bounded while the files on disk keep everything."""

    async def body() -> None:
        config = AgentConfig(context_window=3000, reserve_tokens=1000, keep_recent_tokens=400)
        clock = FakeClock()
        keep_all = Retention(max_age_seconds=3650 * DAY, max_files=100_000)  # every file stays, to count them
        tree = SessionTree.create(tmp_path / "lane", clock, keep_all)
        async with harness(tmp_path, clock=clock, config=config, session=tree) as h:
            h.fake.respond_with(_summaries)
            counts: list[int] = []
            sizes: list[int] = []
            for turn in range(300):
                outcome = await h.agent.run(f"turn {turn} {TURN_TEXT}")
                assert outcome.kind is OutcomeKind.OK
                entries = h.session.entries
                counts.append(len(entries))
                sizes.append(sum(len(json.dumps(e)) for e in entries))
                h.fake.requests.clear()
            await h.agent.run("last")
            request = h.fake.requests[-1]["messages"]
            assert request[0]["content"][0]["text"].startswith(SUMMARY_PREFIX)
            assert user_texts(request[-1]) == ["last"]
            files = sorted((tmp_path / "lane").glob("*.jsonl"))
            on_disk = sum(p.stat().st_size for p in files)
        assert len(files) > 20  # compaction ran again and again, each time in a new file
        assert max(counts) <= 40 and max(sizes) <= 20_000  # bounded by the window, not by the turns
        assert max(sizes[200:]) <= max(sizes[:100]) * 1.5  # no drift late in the conversation
        assert on_disk > 10 * max(sizes)  # the history is on disk, not in memory

    arun(body())


def test_compaction_starts_a_new_file_naming_the_previous(tmp_path: Path) -> None:
    """A threshold compaction writes a new file whose header names the old one; the kept tail and summary reload from it alone."""

    async def body() -> None:
        clock = FakeClock()
        tree = SessionTree.create(tmp_path / "lane", clock)
        first = tree.path
        ids = [tree.append_message({"role": "user", "content": [{"type": "text", "text": f"u{i} " + "x" * 1600}]})["id"] for i in range(4)]
        tree.append_message(
            {"role": "assistant", "content": [{"type": "text", "text": "a short"}]},
            usage={"input": 2500, "output": 10, "cache_read": 0, "cache_write": 0},
        )
        config = AgentConfig(context_window=3000, reserve_tokens=1000, keep_recent_tokens=410)
        async with harness(tmp_path, clock=clock, config=config, session=tree) as h:
            h.fake.script(fa.text("SUMMARY"), fa.text("answer"))
            outcome = await h.agent.run("now")
            assert outcome.kind is OutcomeKind.OK
            second = h.session.path
            messages = h.session.messages()
        assert second != first and second.parent == first.parent and second.name > first.name
        assert _header(second)["previous"] == first.name
        assert not list(first.parent.glob("*.partial"))
        old_types = [json.loads(line)["type"] for line in first.read_text().splitlines()[1:]]
        assert "compaction" not in old_types  # the old file ends where the new one takes over
        new_lines = [json.loads(line) for line in second.read_text().splitlines()[1:]]
        compaction = next(e for e in new_lines if e["type"] == "compaction")
        assert new_lines[0]["id"] == compaction["first_kept_id"] == ids[2]  # u2, u3 and the answer are the 410-token tail
        assert all("usage" not in e for e in new_lines[: new_lines.index(compaction)])  # spend is counted once
        reopened = SessionTree.open_latest(tmp_path / "lane", clock)
        assert reopened.path == second and reopened.messages() == messages
        assert reopened.messages()[0]["content"][0]["text"] == SUMMARY_PREFIX + "SUMMARY"
        assert reopened.last_model() == "fake-model"
        reopened.close()

    arun(body())


@pytest.mark.parametrize("content", [b"", b'{"type":"sess', b"garbage\n", b'{"type":"message","id":"a"}\n'])
def test_unreadable_file_is_moved_aside_and_the_lane_starts_cold(tmp_path: Path, content: bytes) -> None:
    """A current file with no readable header becomes <name>.broken; a new empty tree answers the next run."""

    async def body() -> None:
        clock = FakeClock()
        lane = tmp_path / "lane"
        lane.mkdir()
        bad = lane / "20270115T080000000000Z_deadbeef.jsonl"
        bad.write_bytes(content)
        tree = SessionTree.open_latest(lane, clock)
        assert (lane / (bad.name + ".broken")).read_bytes() == content
        assert not bad.exists() and tree.entries == [] and tree.path.name > bad.name
        async with harness(tmp_path, clock=clock, session=tree) as h:
            outcome = await h.agent.run("hello again")
            assert outcome.kind is OutcomeKind.OK
            assert [user_texts(m) for m in h.fake.requests[0]["messages"]] == [["hello again"]]

    arun(body())


def _name(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y%m%dT%H%M%S%fZ") + "_0badcafe.jsonl"


def test_retention_choice_by_age_and_count_at_the_bound() -> None:
    """A file is as old as the time since its successor started; at exactly max_files nothing goes, one more and the oldest goes."""
    now = 1_800_000_000.0
    names = [_name(now - (10 - i) * DAY) for i in range(10)]  # started ten days ago ... today
    current = names[-1]
    # names[0] ended when names[1] started, nine days ago; names[1] eight days ago
    assert choose(names, current, now, Retention(max_age_seconds=7.5 * DAY, max_files=50)) == names[:2]
    assert choose(names, current, now, Retention(max_age_seconds=30 * DAY, max_files=10)) == []
    assert choose(names, current, now, Retention(max_age_seconds=30 * DAY, max_files=9)) == names[:1]
    assert choose(names, current, now, Retention(max_age_seconds=30 * DAY, max_files=1)) == names[:9]
    assert choose([*names, "notes.jsonl"], current, now, Retention(max_age_seconds=DAY, max_files=1)) == names[:9]
    old_current = names[:2]  # the current file is kept however old, and counts toward max_files
    assert choose(old_current, names[1], now, Retention(max_age_seconds=DAY, max_files=1)) == names[:1]


def test_retention_prunes_a_lane_directory_on_a_fake_clock(tmp_path: Path) -> None:
    """Trees created a day apart: creating one more deletes what is past the age and beyond the count."""
    clock = FakeClock()
    lane = tmp_path / "lane"
    keep_all = Retention(max_age_seconds=30 * DAY, max_files=50)
    lane.mkdir()
    broken = lane / (_name(clock.wall() - 40 * DAY) + ".broken")
    broken.write_text("x")
    made: list[Path] = []
    for _ in range(6):
        tree = SessionTree.create(lane, clock, keep_all)
        tree.close()
        made.append(tree.path)
        clock.advance(DAY)
    assert len(list(lane.iterdir())) == 7  # the .broken one ended when the first tree started, 6 days ago
    tree = SessionTree.create(lane, clock, Retention(max_age_seconds=4.5 * DAY, max_files=4))
    left = sorted(p.name for p in lane.iterdir())
    assert left == sorted([p.name for p in made[3:]] + [tree.path.name])  # age took the .broken, 0 and 1; count took 2
    assert tree.prune() == []
    tree.close()


def test_retention_settings_reach_the_agent_config(tmp_path: Path) -> None:
    """CLANKIE_SESSION_RETENTION_DAYS and CLANKIE_SESSION_MAX_FILES become the lane's retention; zero files is refused."""
    env = {"CLANKIE_STATE_DIR": str(tmp_path / "s"), "CLANKIE_RUNTIME_DIR": str(tmp_path / "r")}
    config = AgentConfig.from_settings(settings_mod.load({**env, "CLANKIE_SESSION_RETENTION_DAYS": "2", "CLANKIE_SESSION_MAX_FILES": "7"}))
    assert config.retention == Retention(max_age_seconds=2 * DAY, max_files=7)
    assert AgentConfig.from_settings(settings_mod.load(env)).retention == Retention()
    with pytest.raises(Exception, match="SESSION_MAX_FILES"):
        settings_mod.load({**env, "CLANKIE_SESSION_MAX_FILES": "0"})


def test_prune_leaves_other_files_alone(tmp_path: Path) -> None:
    """Only stamped session files (.jsonl, .broken, .partial) count; anything else in the directory is untouched."""
    now = 1_800_000_000.0
    old, newer, current = _name(now - 10 * DAY), _name(now - 9 * DAY) + ".broken", _name(now)
    for name in (old, newer, current, "notes.txt", "hand-made.jsonl"):
        (tmp_path / name).write_text("{}\n")
    assert prune(tmp_path, current, now, Retention(max_age_seconds=DAY, max_files=5)) == [old]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([newer, current, "notes.txt", "hand-made.jsonl"])


def test_trees_hold_no_file_open(tmp_path: Path) -> None:
    """Two hundred lanes with appended, synced trees hold no session file open once their syncs are done."""
    clock = FakeClock()
    trees = [SessionTree.create(tmp_path / f"lane{i}", clock) for i in range(200)]
    for tree in trees:
        tree.append_message({"role": "user", "content": [{"type": "text", "text": "hi"}]})
        tree.sync()
    drain_syncs()
    assert open_under(tmp_path) == []
    for tree in trees:
        tree.close()


def test_a_continuation_that_cannot_be_written_compacts_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If the new file cannot be renamed into place, no .partial is left and the compaction lands in the current file."""
    clock = FakeClock()
    tree = SessionTree.create(tmp_path, clock)
    ids = [tree.append_message({"role": "user", "content": [{"type": "text", "text": f"m{i}"}]})["id"] for i in range(3)]

    def refuse(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "rename", refuse)
    entry = tree.continue_with(summary="S", first_kept_id=ids[2], tokens_before=10)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == [tree.path.name]
    assert [e["id"] for e in tree.entries] == [ids[2], entry["id"]]  # memory is trimmed all the same
    reopened = SessionTree.open(tree.path, clock)
    assert reopened.messages() == tree.messages()
    assert reopened.messages()[0]["content"][0]["text"] == SUMMARY_PREFIX + "S"
    tree.close()
