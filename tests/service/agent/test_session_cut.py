"""A run that never ended (its process died) is cut off its lane's tree when the lane is next opened.

A lane runs one run at a time and every run ends with a ``run_end`` entry, so
the messages after the last one belong to a run whose process died. Cutting
them is what takes a poison message's words out of its lane: its runs all
died, so none of them is on the branch any more.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clankie.testing.clock import FakeClock
from service.agent.branch import unfinished_tail
from service.agent.session import SessionTree
from service.agent.transcript import CONTEXT_NOTE, SUMMARY_PREFIX, context_messages


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def ended_run(tree: SessionTree, asked: str, answer: str, run_id: str) -> None:
    tree.append_message(user(asked))
    tree.append_message(assistant(answer), usage={"input": 10, "output": 5, "cache_read": 0, "cache_write": 0})
    tree.append_custom("run_end", {"run_id": run_id, "outcome": "ok"})


def texts(tree: SessionTree) -> list[str]:
    return [block["text"] for m in tree.messages() for block in m["content"]]


def reopen(tree: SessionTree, clock: FakeClock) -> SessionTree:
    """What a new process does with the lane: the latest tree from disk, less a run that never ended."""
    tree.close()
    again = SessionTree.open_latest(tree.path.parent, clock)
    again.drop_unfinished()
    return again


def test_a_dead_run_is_cut_and_the_lane_continues_from_before_it(tmp_path: Path) -> None:
    """The messages after the last run_end leave the branch, on disk too; what came before is untouched."""
    clock = FakeClock()
    tree = SessionTree.create(tmp_path / "lane", clock)
    ended_run(tree, "are we on for tonight?", "Yes, eight o'clock.", "r1")
    tree.append_message(user("zx-poison"))
    tree.append_message(assistant("half an ans"))  # the process died before the run ended
    again = reopen(tree, clock)
    assert texts(again) == ["are we on for tonight?", "Yes, eight o'clock."]
    assert again.entries[-1]["custom_type"] == "cut" and again.entries[-1]["data"] == {"messages": 2}
    ended_run(again, "and tomorrow?", "Saturday, same place.", "r3")
    again.close()
    from_disk = SessionTree.open_latest(tmp_path / "lane", clock)
    assert from_disk.drop_unfinished() == 0  # the cut is on disk: nothing left to cut
    assert texts(from_disk) == ["are we on for tonight?", "Yes, eight o'clock.", "and tomorrow?", "Saturday, same place."]
    assert "zx-poison" in from_disk.path.read_text()  # still in the file, off the path: never read back
    from_disk.close()


def test_a_tree_whose_last_run_ended_is_left_alone(tmp_path: Path) -> None:
    """Nothing after the last run_end but runtime records: no cut, not a line written."""
    clock = FakeClock()
    tree = SessionTree.create(tmp_path / "lane", clock)
    ended_run(tree, "hi", "hello", "r1")
    tree.append_custom(CONTEXT_NOTE, {"text": "a note"})
    tree.close()
    size = tree.path.stat().st_size
    again = SessionTree.open_latest(tmp_path / "lane", clock)
    assert again.drop_unfinished() == 0 and again.path.stat().st_size == size
    again.close()


def test_a_lane_whose_only_run_died_comes_back_empty(tmp_path: Path) -> None:
    """With no run_end at all every message is the dead run's."""
    clock = FakeClock()
    tree = SessionTree.create(tmp_path / "lane", clock)
    tree.append_model_change("m1")
    tree.append_message(user("zx-poison"))
    again = reopen(tree, clock)
    assert again.messages() == [] and again.last_model() == "m1"
    again.close()


def test_what_else_the_dead_tail_held_survives_the_cut(tmp_path: Path) -> None:
    """A model change and a note written during the dead run are kept; usage is not copied, so spend counts once."""
    clock = FakeClock()
    tree = SessionTree.create(tmp_path / "lane", clock)
    ended_run(tree, "hi", "hello", "r1")
    tree.append_model_change("m2")
    tree.append_message(user("zx-poison"))
    tree.append_custom(CONTEXT_NOTE, {"text": "[service note] a message was dropped"})
    tree.append_message(assistant("never finished"), usage={"input": 99, "output": 1, "cache_read": 0, "cache_write": 0})
    again = reopen(tree, clock)
    assert texts(again) == ["hi", "hello", "[service note] a message was dropped"]
    assert again.last_model() == "m2"
    lines = [json.loads(line) for line in again.path.read_text().splitlines()]
    assert sum(1 for e in lines if "usage" in e) == 2  # hello's, and the dead answer's line (off the path)
    again.close()


def test_a_compaction_made_during_the_dead_run_keeps_its_summary(tmp_path: Path) -> None:
    """The run compacted into a new file and died: its message goes, the summary of what came before stays."""
    clock = FakeClock()
    tree = SessionTree.create(tmp_path / "lane", clock)
    ended_run(tree, "old question", "old answer", "r1")
    poison = tree.append_message(user("zx-poison"))
    tree.continue_with(summary="They talked about tonight.", first_kept_id=poison["id"], tokens_before=5000)
    tree.append_message(assistant("partial"))
    again = reopen(tree, clock)
    assert texts(again) == [SUMMARY_PREFIX + "They talked about tonight."]
    again.close()


def test_unfinished_tail_is_after_the_last_run_end() -> None:
    """The pure rule: the index after the last run_end if a message follows it, else None."""
    run_end = {"id": "e", "type": "custom", "custom_type": "run_end", "data": {}}
    message = {"id": "m", "type": "message", "message": user("x")}
    note = {"id": "n", "type": "custom", "custom_type": CONTEXT_NOTE, "data": {"text": "t"}}
    assert unfinished_tail([]) is None
    assert unfinished_tail([message, run_end]) is None
    assert unfinished_tail([message, run_end, note]) is None
    assert unfinished_tail([message, run_end, message]) == 2
    assert unfinished_tail([message]) == 0


def test_a_context_note_is_a_line_the_model_sees() -> None:
    """A note is shown as a user line and joins the next user message's turn; a note without text shows nothing."""
    entries = [
        {"id": "a", "type": "message", "message": assistant("earlier answer")},
        {"id": "n", "type": "custom", "custom_type": CONTEXT_NOTE, "data": {"text": "[service note] dropped"}},
        {"id": "b", "type": "message", "message": user("next question")},
        {"id": "x", "type": "custom", "custom_type": CONTEXT_NOTE, "data": {}},
    ]
    assert context_messages(entries) == [
        {"role": "user", "content": [{"type": "text", "text": "(conversation resumed)"}]},
        assistant("earlier answer"),
        {"role": "user", "content": [{"type": "text", "text": "[service note] dropped"},
                                     {"type": "text", "text": "next question"}]},
    ]
