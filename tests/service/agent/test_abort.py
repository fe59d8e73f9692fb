"""Abort mid-stream and mid-tool leaves a valid, resumable session tree."""

from __future__ import annotations

import asyncio
from pathlib import Path

from clankie.testing import fake_anthropic as fa
from clankie.testing.clock import FakeClock
from service.agent.agent import ABORTED_RESULT
from service.agent.events import RetryStart, RunEnd, TextDelta, ToolStart
from service.agent.outcome import OutcomeKind
from service.agent.session import SessionTree
from service.agent.transcript import repair
from tests.service.agent.helpers import arun, echo_tool, harness


def _valid(messages: list[dict]) -> bool:
    return repair(messages) == messages


def test_abort_mid_stream_ends_aborted_and_the_tree_resumes(tmp_path: Path) -> None:
    """Aborting a stalled stream settles the run as aborted; a reopened tree runs again with a valid transcript."""

    async def body() -> None:
        clock = FakeClock()
        async with harness(tmp_path, clock=clock) as h:
            h.fake.script(fa.text("never finished", stall_after=3))
            run = asyncio.create_task(h.agent.run("hello"))
            await h.wait_event(lambda e: isinstance(e, TextDelta))
            h.agent.abort("stalled")
            outcome = await run
            assert outcome.kind is OutcomeKind.ABORTED and outcome.text == ""
            assert not h.agent.is_running
            end = [e for e in h.session.entries if e.get("custom_type") == "run_end"][-1]
            assert end["data"] == {**end["data"], "outcome": "aborted", "reason": "stalled"}
            assert len(h.of(RunEnd)) == 1
            path = h.session.path
        reopened = SessionTree.open(path, clock)
        async with harness(tmp_path, clock=clock, session=reopened) as h2:
            h2.fake.script(fa.text("back"))
            assert (await h2.agent.run("again")).text == "back"
            messages = h2.fake.requests[0]["messages"]
            assert _valid(messages)
            assert [m["role"] for m in messages] == ["user"]
            assert [b["text"] for b in messages[0]["content"]] == ["hello", "again"]

    arun(body())


def test_abort_mid_tool_gives_orphans_error_results(tmp_path: Path) -> None:
    """Aborting during a tool batch cancels the tools and records error results for every call."""

    async def body() -> None:
        clock = FakeClock()
        gate = asyncio.Event()  # never set: the tools hang
        tools = [echo_tool("a", gate), echo_tool("b", gate)]
        async with harness(tmp_path, tools=tools, clock=clock) as h:
            h.fake.script(fa.tool_use(("a", {"text": "x"}), ("b", {"text": "y"})))
            run = asyncio.create_task(h.agent.run("work"))
            await h.wait_event(lambda e: isinstance(e, ToolStart) and e.name == "b")
            h.agent.abort()
            outcome = await run
            assert outcome.kind is OutcomeKind.ABORTED
            messages = h.session.messages()
            assert _valid(messages)
            results = messages[-1]["content"]
            assert [r["content"] for r in results] == [ABORTED_RESULT, ABORTED_RESULT]
            path = h.session.path
        reopened = SessionTree.open(path, clock)
        async with harness(tmp_path, clock=clock, session=reopened) as h2:
            h2.fake.script(fa.text("recovered"))
            assert (await h2.agent.run("next")).kind is OutcomeKind.OK
            sent = h2.fake.requests[0]["messages"]
            assert _valid(sent) and sent[-1]["content"][-1]["text"] == "next"

    arun(body())


def test_cancelling_the_caller_aborts_the_run(tmp_path: Path) -> None:
    """Cancelling the task awaiting run() aborts the run and leaves the agent idle."""

    async def body() -> None:
        async with harness(tmp_path) as h:
            h.fake.script(fa.text("zzz", stall_after=2))
            run = asyncio.create_task(h.agent.run("hello"))
            await h.fake.wait_for_requests(1)
            run.cancel()
            try:
                await run
            except asyncio.CancelledError:
                pass
            assert not h.agent.is_running
            assert h.of(RunEnd)[-1].outcome.kind is OutcomeKind.ABORTED

    arun(body())


def test_abort_during_retry_wait(tmp_path: Path) -> None:
    """Aborting while the runtime waits to retry ends the run at once without another request."""

    async def body() -> None:
        clock = FakeClock()
        async with harness(tmp_path, clock=clock) as h:
            h.fake.script(fa.overloaded())
            run = asyncio.create_task(h.agent.run("hello"))
            await h.wait_event(lambda e: isinstance(e, RetryStart))
            h.agent.abort()
            outcome = await run
            assert outcome.kind is OutcomeKind.ABORTED and outcome.abort_reason == "aborted"
            assert len(h.fake.requests) == 1
            assert clock.sleepers == 0

    arun(body())


def test_abort_before_the_run_task_starts(tmp_path: Path) -> None:
    """An abort issued in the same tick as run() still settles the run as aborted and keeps the message."""

    async def body() -> None:
        async with harness(tmp_path) as h:
            run = asyncio.create_task(h.agent.run("too soon"))
            await asyncio.sleep(0)  # run() has created its task, which has not started yet
            h.agent.abort("stalled")
            outcome = await run
            assert outcome.kind is OutcomeKind.ABORTED and outcome.abort_reason == "stalled"
            assert h.fake.requests == [] and not h.agent.is_running
            assert h.session.messages()[0]["content"][0]["text"] == "too soon"
            h.fake.script(fa.text("later"))
            assert (await h.agent.run("now")).text == "later"

    arun(body())
