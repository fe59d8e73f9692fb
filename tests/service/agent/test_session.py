"""Session trees: append-only JSONL that survives torn lines and kill -9."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from clankie.testing.clock import FakeClock
from service.agent.session import SessionCorrupt, SessionTree

ROOT = Path(__file__).resolve().parents[3]


def _user(text: str) -> dict[str, object]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def _texts(tree: SessionTree) -> list[str]:
    return [e["message"]["content"][0]["text"] for e in tree.path_to_leaf() if e["type"] == "message"]


def test_entries_chain_and_reload(tmp_path: Path) -> None:
    """Entries carry id, parent_id, type and timestamp, and a reopened tree has the same path and messages."""
    clock = FakeClock()
    tree = SessionTree.create(tmp_path, clock)
    first = tree.append_message(_user("one"))
    tree.append_model_change("m1")
    third = tree.append_custom("note", {"k": 1})
    tree.close()
    assert first["parent_id"] is None and third["parent_id"] is not None
    assert {"id", "parent_id", "type", "timestamp"} <= set(first)
    again = SessionTree.open(tree.path, clock)
    assert [e["id"] for e in again.path_to_leaf()] == [e["id"] for e in tree.entries]
    assert again.messages() == [_user("one")]
    assert again.last_model() == "m1"
    header = json.loads(tree.path.read_text().splitlines()[0])
    assert header["type"] == "session" and header["id"] == again.session_id
    again.close()


def test_open_latest_resumes_newest_or_creates(tmp_path: Path) -> None:
    """open_latest creates a tree in an empty directory and resumes the newest one otherwise."""
    clock = FakeClock()
    made = SessionTree.open_latest(tmp_path / "lane", clock)
    made.close()
    clock.advance(5)
    newer = SessionTree.create(tmp_path / "lane", clock)
    newer.append_message(_user("newest"))
    newer.close()
    resumed = SessionTree.open_latest(tmp_path / "lane", clock)
    assert resumed.path == newer.path and resumed.messages() == [_user("newest")]
    resumed.close()


def test_torn_last_line_is_dropped_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A half-written last line is cut off with a warning, complete lines survive, and appends continue cleanly."""
    clock = FakeClock()
    tree = SessionTree.create(tmp_path, clock)
    tree.append_message(_user("kept"))
    tree.close()
    with tree.path.open("ab") as f:
        f.write(b'{"type":"message","id":"dead","parent_id":null,"mess')
    with caplog.at_level(logging.WARNING):
        again = SessionTree.open(tree.path, clock)
    assert "torn last line" in caplog.text
    assert again.messages() == [_user("kept")]
    again.append_message(_user("after"))
    again.close()
    final = SessionTree.open(tree.path, clock)
    assert _texts(final) == ["kept", "after"]
    final.close()


def test_unreadable_middle_line_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A corrupt complete line is skipped with a warning; the entries after it still load."""
    clock = FakeClock()
    tree = SessionTree.create(tmp_path, clock)
    tree.append_message(_user("a"))
    tree.close()
    with tree.path.open("ab") as f:
        f.write(b"not json at all\n")
    again = SessionTree.open(tree.path, clock)
    again.append_message(_user("b"))
    again.close()
    with caplog.at_level(logging.WARNING):
        final = SessionTree.open(tree.path, clock)
    assert "unreadable line" in caplog.text
    assert _texts(final) == ["a", "b"]
    final.close()


def test_file_without_header_is_refused(tmp_path: Path) -> None:
    """A file that is not a session tree raises SessionCorrupt instead of loading garbage."""
    bogus = tmp_path / "x.jsonl"
    bogus.write_text('{"type":"message"}\n')
    with pytest.raises(SessionCorrupt):
        SessionTree.open(bogus, FakeClock())


def test_kill_9_mid_append_leaves_a_loadable_tree(tmp_path: Path) -> None:
    """A writer killed with SIGKILL while appending leaves a tree holding every line it reported written."""
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from clankie.clock import SystemClock
        from service.agent.session import SessionTree
        tree = SessionTree.create(Path({str(tmp_path)!r}), SystemClock())
        print(tree.path, flush=True)
        big = "y" * 200_000
        n = 0
        while True:
            e = tree.append_message({{"role": "user", "content": [{{"type": "text", "text": big}}]}})
            n += 1
            if n % 5 == 0:
                tree.sync()
            print(e["id"], flush=True)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ}
    )
    assert child.stdout is not None
    path = Path(child.stdout.readline().strip())
    written = [child.stdout.readline().strip() for _ in range(20)]
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    child.stdout.close()
    tree = SessionTree.open(path, FakeClock())
    ids = [e["id"] for e in tree.entries]
    assert ids[: len(written)] == written
    assert len(tree.messages()) >= 1
    tree.append_message(_user("still usable"))
    tree.close()
    assert SessionTree.open(path, FakeClock()).entries[-1]["message"] == _user("still usable")


def test_short_writes_are_continued_and_a_failed_write_never_glues_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write the kernel cuts short is finished; one that fails raises, and the next entry still reloads."""
    tree = SessionTree.create(tmp_path, FakeClock())
    real_write = os.write
    plan: list[str] = []

    def flaky_write(fd: int, data: bytes) -> int:
        step = plan.pop(0) if plan else "all"
        if step == "fail":
            raise OSError(28, "No space left on device")
        return real_write(fd, bytes(data[:7]) if step == "short" else data)

    monkeypatch.setattr(os, "write", flaky_write)
    plan[:] = ["short", "short", "all"]
    tree.append_message(_user("cut into pieces"))
    plan[:] = ["short", "fail"]
    with pytest.raises(OSError):
        tree.append_message(_user("lost to a full disk"))
    tree.append_message(_user("after the disk was freed"))
    monkeypatch.undo()
    tree.close()
    reopened = SessionTree.open(tree.path, FakeClock())
    assert [e["message"]["content"][0]["text"] for e in reopened.entries] == ["cut into pieces", "after the disk was freed"]


def test_lines_without_id_or_type_are_skipped_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A hand-edited line that is JSON but not an entry is skipped; the rest of the session loads."""
    tree = SessionTree.create(tmp_path, FakeClock())
    tree.append_message(_user("one"))
    tree.close()
    with tree.path.open("a") as f:
        f.write('{"type":"message","note":"no id"}\n{"id":"abc"}\n[1,2]\n')
    reopened = SessionTree.open(tree.path, FakeClock())
    reopened.append_message(_user("two"))
    assert _texts(reopened) == ["one", "two"]
    assert any("without an id or type" in r.getMessage() for r in caplog.records)
    reopened.close()
