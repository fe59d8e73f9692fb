"""Compaction keeps the recent tail, never cuts at a tool result, and recovers from context overflow."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from clankie.testing import fake_anthropic as fa
from clankie.testing.clock import FakeClock
from service.agent.agent import AgentConfig
from service.agent.compaction import SUMMARY_SYSTEM, context_tokens, plan
from service.agent.events import CompactionEnd, CompactionStart, TextDelta
from service.agent.outcome import OutcomeKind
from service.agent.session import SessionTree
from service.agent.transcript import SUMMARY_PREFIX, repair
from tests.service.agent.helpers import arun, harness, user_texts

BIG = "x" * 1600  # about 400 tokens


def _history(tree: SessionTree, context_tokens: int) -> list[str]:
    """u0 a0 u1 [tool_use] [tool_result] a2: the cut must land on the tool_use, not the result."""
    ids = [
        tree.append_message({"role": "user", "content": [{"type": "text", "text": "u0 " + BIG}]})["id"],
        tree.append_message({"role": "assistant", "content": [{"type": "text", "text": "a0 " + BIG}]})["id"],
        tree.append_message({"role": "user", "content": [{"type": "text", "text": "u1 " + BIG}]})["id"],
        tree.append_message(
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "look", "input": {}}]}
        )["id"],
        tree.append_message(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": BIG}]}
        )["id"],
        tree.append_message(
            {"role": "assistant", "content": [{"type": "text", "text": "a2 short"}]},
            usage={"input": context_tokens, "output": 10, "cache_read": 0, "cache_write": 0},
        )["id"],
    ]
    tree.sync()
    return ids


def _config() -> AgentConfig:
    return AgentConfig(context_window=3000, reserve_tokens=1000, keep_recent_tokens=410)


def test_plan_never_cuts_at_a_tool_result(tmp_path: Path) -> None:
    """When the keep budget ends on a tool_result, the cut moves back to its tool_use."""
    clock = FakeClock()
    tree = SessionTree.create(tmp_path, clock)
    ids = _history(tree, 100)
    chosen = plan(tree.path_to_leaf(), keep_recent_tokens=410)
    assert chosen is not None
    assert chosen.first_kept_id == ids[3]
    assert len(chosen.summarize) == 3
    assert plan(tree.path_to_leaf(), keep_recent_tokens=100_000) is None
    tree.close()


def test_threshold_compaction_summarises_and_keeps_the_tail(tmp_path: Path) -> None:
    """Over the window minus reserve, a summary call runs first and the next request is summary + valid tail."""

    async def body() -> None:
        clock = FakeClock()
        tree = SessionTree.create(tmp_path / "lane", clock)
        ids = _history(tree, 2500)
        async with harness(tmp_path, clock=clock, config=_config(), session=tree) as h:
            h.fake.script(fa.text("SUMMARY: user sent u0 and u1."), fa.text("answer"))
            outcome = await h.agent.run("now")
            assert outcome.text == "answer"
            summary_req, main_req = h.fake.requests
            assert summary_req["system"][0]["text"] == SUMMARY_SYSTEM
            assert "u0 " in summary_req["messages"][0]["content"][0]["text"]
            messages = main_req["messages"]
            assert repair(messages) == messages
            assert messages[0]["content"][0]["text"] == SUMMARY_PREFIX + "SUMMARY: user sent u0 and u1."
            assert messages[1]["content"][0]["type"] == "tool_use"
            assert messages[2]["content"][0]["type"] == "tool_result"
            assert user_texts(messages[-1]) == ["now"]
            assert not any(b.get("text", "").startswith("u0 ") for m in messages for b in m["content"])
            entry = next(e for e in h.session.entries if e["type"] == "compaction")
            assert entry["first_kept_id"] == ids[3] and entry["tokens_before"] > 2000
            assert [e.reason for e in h.of(CompactionEnd) if e.ok] == ["threshold"]
            assert "".join(e.text for e in h.of(TextDelta)) == "answer"  # summary text is not answer text
            assert outcome.usage.output > 0

    arun(body())


def test_overflow_error_compacts_and_retries_once(tmp_path: Path) -> None:
    """A prompt-too-long error triggers one compaction and one retry of the call."""

    async def body() -> None:
        clock = FakeClock()
        tree = SessionTree.create(tmp_path / "lane", clock)
        _history(tree, 100)
        async with harness(tmp_path, clock=clock, config=AgentConfig(keep_recent_tokens=410), session=tree) as h:
            h.fake.script(fa.prompt_too_long(), fa.text("summary"), fa.text("answer"))
            outcome = await h.agent.run("now")
            assert outcome.kind is OutcomeKind.OK and outcome.text == "answer"
            assert len(h.fake.requests) == 3
            assert [e.reason for e in h.of(CompactionStart)] == ["overflow"]

    arun(body())


def test_second_overflow_fails_the_run(tmp_path: Path) -> None:
    """If the call still overflows after one compaction, the run ends model_failed."""

    async def body() -> None:
        clock = FakeClock()
        tree = SessionTree.create(tmp_path / "lane", clock)
        _history(tree, 100)
        async with harness(tmp_path, clock=clock, config=AgentConfig(keep_recent_tokens=410), session=tree) as h:
            h.fake.script(fa.prompt_too_long(), fa.text("summary"), fa.prompt_too_long())
            outcome = await h.agent.run("now")
            assert outcome.kind is OutcomeKind.MODEL_FAILED
            assert len(h.fake.requests) == 3

    arun(body())


def test_message_arriving_during_compaction_is_delivered_after(tmp_path: Path) -> None:
    """A steer that lands while the summary is being written joins the same user turn after compaction."""

    async def body() -> None:
        clock = FakeClock()
        gate = asyncio.Event()
        tree = SessionTree.create(tmp_path / "lane", clock)
        _history(tree, 2500)
        async with harness(tmp_path, clock=clock, config=_config(), session=tree) as h:
            h.fake.script(fa.text("summary", stall_after=2, stall_until=gate), fa.text("answer"))
            run = asyncio.create_task(h.agent.run("now"))
            await h.wait_event(lambda e: isinstance(e, CompactionStart))
            assert h.agent.steer("meanwhile")
            gate.set()
            outcome = await run
            assert outcome.kind is OutcomeKind.OK and outcome.steered == 1
            last: dict[str, Any] = h.fake.requests[1]["messages"][-1]
            assert user_texts(last) == ["now", "meanwhile"]

    arun(body())


def test_context_tokens_after_compaction_ignore_stale_usage(tmp_path: Path) -> None:
    """After a compaction the estimate is summary plus kept tail, not the old usage numbers, until a new answer reports usage."""
    clock = FakeClock()
    tree = SessionTree.create(tmp_path, clock)
    ids = _history(tree, 50_000)
    assert context_tokens(tree.path_to_leaf()) > 50_000
    tree.append_compaction("short summary", ids[3], 50_000)
    after = context_tokens(tree.path_to_leaf())
    assert 400 < after < 1000
    tree.append_message(
        {"role": "assistant", "content": [{"type": "text", "text": "new"}]},
        usage={"input": 700, "output": 5, "cache_read": 0, "cache_write": 0},
    )
    assert context_tokens(tree.path_to_leaf()) == 705
    tree.close()
