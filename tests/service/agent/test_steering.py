"""Steering: queued messages arrive together at the next turn boundary, and a burst gets one answer."""

from __future__ import annotations

import asyncio
from pathlib import Path

from clankie.testing import fake_anthropic as fa
from service.agent.agent import AgentBusy
from service.agent.events import RunEnd, SteerDelivered, TextDelta, ToolEnd, ToolStart
from service.agent.outcome import OutcomeKind
from tests.service.agent.helpers import arun, echo_tool, harness, user_texts


def test_burst_of_three_steers_is_one_user_turn_and_one_answer(tmp_path: Path) -> None:
    """Three steers during one streaming call are delivered together in one user turn, and the run answers once."""

    async def body() -> None:
        gate = asyncio.Event()
        async with harness(tmp_path) as h:
            h.fake.script(fa.text("first draft", stall_after=2, stall_until=gate), fa.text("one answer"))
            run = asyncio.create_task(h.agent.run("a"))
            await h.fake.wait_for_requests(1)
            assert h.agent.steer("b") and h.agent.steer("c") and h.agent.steer("d")
            gate.set()
            outcome = await run
            assert outcome.kind is OutcomeKind.OK and outcome.text == "one answer"
            assert outcome.steered == 3
            assert len(h.fake.requests) == 2
            last_user = h.fake.requests[1]["messages"][-1]
            assert last_user["role"] == "user" and user_texts(last_user) == ["b", "c", "d"]
            assert [e.count for e in h.of(SteerDelivered)] == [3]
            assert len(h.of(RunEnd)) == 1

    arun(body())


def test_steer_during_two_tool_batch_waits_for_both_tools(tmp_path: Path) -> None:
    """A steer that arrives while two tools run is delivered only after both results, in the same user turn."""

    async def body() -> None:
        gate = asyncio.Event()
        calls: list[str] = []
        tools = [echo_tool("left", gate, calls), echo_tool("right", gate, calls)]
        async with harness(tmp_path, tools=tools) as h:
            h.fake.script(
                fa.tool_use(("left", {"text": "1"}), ("right", {"text": "2"})),
                fa.text("both done"),
            )
            run = asyncio.create_task(h.agent.run("go"))
            await h.wait_event(lambda e: isinstance(e, ToolStart) and e.name == "right")
            assert h.agent.steer("also this")
            await asyncio.sleep(0)
            assert len(h.fake.requests) == 1
            gate.set()
            outcome = await run
            assert outcome.text == "both done"
            assert sorted(calls) == ["end left", "end right", "start left", "start right"]
            turn = h.fake.requests[1]["messages"][-1]
            kinds = [b["type"] for b in turn["content"]]
            assert kinds == ["tool_result", "tool_result", "text"]
            assert [b["is_error"] for b in turn["content"][:2]] == [False, False]
            assert turn["content"][2]["text"] == "also this"
            assert len([e for e in h.events if isinstance(e, ToolEnd)]) == 2

    arun(body())


def test_steer_while_final_answer_streams_gets_one_more_call(tmp_path: Path) -> None:
    """A message arriving while the tool-free answer streams makes the run call the model again before settling."""

    async def body() -> None:
        gate = asyncio.Event()
        async with harness(tmp_path) as h:
            h.fake.script(fa.text("draft answer", stall_after=4, stall_until=gate), fa.text("final answer"))
            run = asyncio.create_task(h.agent.run("question"))
            await h.wait_event(lambda e: isinstance(e, TextDelta))
            assert h.agent.steer("one more thing")
            gate.set()
            outcome = await run
            assert outcome.text == "final answer" and outcome.steered == 1
            messages = h.fake.requests[1]["messages"]
            assert [m["role"] for m in messages] == ["user", "assistant", "user"]
            assert messages[1]["content"][0]["text"] == "draft answer"
            assert user_texts(messages[2]) == ["one more thing"]

    arun(body())


def test_steer_without_live_run_is_refused_and_run_while_live_raises(tmp_path: Path) -> None:
    """steer() on an idle agent queues nothing, and run() during a live run raises AgentBusy."""

    async def body() -> None:
        gate = asyncio.Event()
        async with harness(tmp_path) as h:
            assert h.agent.steer("nobody listening") is False
            h.fake.script(fa.text("x", stall_after=1, stall_until=gate))
            run = asyncio.create_task(h.agent.run("a"))
            await h.fake.wait_for_requests(1)
            try:
                await h.agent.run("b")
            except AgentBusy:
                pass
            else:
                raise AssertionError("run() while live must raise")
            gate.set()
            assert (await run).kind is OutcomeKind.OK
            assert len(h.fake.requests) == 1

    arun(body())
