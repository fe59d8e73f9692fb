"""Text and tool runs through the real SDK against the fake server."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

from clankie.testing import fake_anthropic as fa
from service.agent.content import UserMessage
from service.agent.events import RunEnd, RunStart, TextDelta, ToolEnd, ToolStart, ToolUpdate, TurnEnd, TurnStart
from service.agent.outcome import OutcomeKind
from service.agent.session import SessionTree
from service.agent.tools import Tool, ToolContext, ToolResult
from tests.service.agent.helpers import SYSTEM, arun, echo_tool, harness


def test_text_run_returns_the_answer_and_persists_both_messages(tmp_path: Path) -> None:
    """A plain text run settles ok with the streamed text, and the tree holds the user and assistant messages."""

    async def body() -> None:
        async with harness(tmp_path) as h:
            h.fake.script(fa.text("Hello ", "there."))
            outcome = await h.agent.run("hi")
            assert outcome.kind is OutcomeKind.OK
            assert outcome.text == "Hello there."
            assert outcome.turns == 1
            assert "".join(e.text for e in h.of(TextDelta)) == "Hello there."
            kinds = [type(e) for e in h.events if not isinstance(e, TextDelta)]
            assert kinds[0] is RunStart and kinds[-1] is RunEnd
            assert TurnStart in kinds and TurnEnd in kinds
            roles = [e["message"]["role"] for e in h.session.entries if e["type"] == "message"]
            assert roles == ["user", "assistant"]
            assert not h.agent.is_running

    arun(body())


def test_tool_run_feeds_results_back_and_keeps_pairing(tmp_path: Path) -> None:
    """A tool_use answer runs the tool, sends its tool_result in the next request, and ends on the final text."""

    async def body() -> None:
        async with harness(tmp_path, tools=[echo_tool()]) as h:
            h.fake.script(fa.tool_use(("echo", {"text": "ping"})), fa.text("done"))
            outcome = await h.agent.run("use the tool")
            assert outcome.kind is OutcomeKind.OK and outcome.text == "done"
            assert outcome.turns == 2
            second = h.fake.requests[1]["messages"]
            call = second[1]["content"][0]
            result = second[2]["content"][0]
            assert call["type"] == "tool_use" and result["type"] == "tool_result"
            assert result["tool_use_id"] == call["id"]
            assert result["content"] == "echo: ping" and result["is_error"] is False
            assert [type(e) for e in h.events if isinstance(e, ToolStart | ToolUpdate | ToolEnd)] == [
                ToolStart,
                ToolUpdate,
                ToolEnd,
            ]
            assert h.fake.requests[0]["tools"][0]["name"] == "echo"

    arun(body())


def test_tool_errors_become_error_results(tmp_path: Path) -> None:
    """An exception, a timeout and an unknown tool name each become an is_error tool_result, not a crash."""

    async def boom(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raise RuntimeError("kaput")

    async def slow(args: dict[str, Any], ctx: ToolContext) -> str:
        await asyncio.Event().wait()
        return "never"

    schema: dict[str, Any] = {"type": "object", "properties": {}}
    tools = [
        Tool(name="boom", description="fails", input_schema=schema, execute=boom),
        Tool(name="slow", description="hangs", input_schema=schema, execute=slow, timeout=5.0),
    ]

    async def body() -> None:
        async with harness(tmp_path, tools=tools) as h:
            h.fake.script(fa.tool_use(("boom", {}), ("slow", {}), ("nope", {})), fa.text("ok"))
            run = asyncio.create_task(h.agent.run("go"))
            await h.wait_event(lambda e: isinstance(e, ToolEnd) and e.name == "nope")
            h.clock.advance(5.0)
            outcome = await run
            assert outcome.kind is OutcomeKind.OK
            results = h.fake.requests[1]["messages"][2]["content"]
            assert [r["is_error"] for r in results] == [True, True, True]
            assert "kaput" in results[0]["content"]
            assert "timed out" in results[1]["content"]
            assert "Unknown tool" in results[2]["content"]

    arun(body())


def test_image_attachment_is_sent_as_base64_block(tmp_path: Path) -> None:
    """A user message with an image path reaches the API as a base64 image block before the text."""
    picture = tmp_path / "shot.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\nfake")

    async def body() -> None:
        async with harness(tmp_path) as h:
            h.fake.script(fa.text("nice picture"))
            await h.agent.run(UserMessage(text="look", images=(picture,)))
            content = h.fake.requests[0]["messages"][0]["content"]
            assert content[0]["type"] == "image"
            assert content[0]["source"]["media_type"] == "image/png"
            assert base64.b64decode(content[0]["source"]["data"]) == picture.read_bytes()
            assert content[1] == {"type": "text", "text": "look"}

    arun(body())


def test_user_message_is_durable_before_the_model_answers(tmp_path: Path) -> None:
    """The incoming message is on disk while the model call is still streaming."""

    async def body() -> None:
        gate = asyncio.Event()
        async with harness(tmp_path) as h:
            h.fake.script(fa.text("late answer", stall_after=2, stall_until=gate))
            run = asyncio.create_task(h.agent.run("remember me"))
            await h.fake.wait_for_requests(1)
            on_disk = SessionTree.open(h.session.path, h.clock)
            texts = [b.get("text") for m in on_disk.messages() for b in m["content"]]
            assert texts == ["remember me"]
            on_disk.close()
            gate.set()
            assert (await run).text == "late answer"

    arun(body())


def test_prompt_caching_marks_stable_prefix_and_reads_it_back(tmp_path: Path) -> None:
    """System and tools carry cache breakpoints, stay byte-identical, and the second turn reads the cache."""

    async def body() -> None:
        async with harness(tmp_path, tools=[echo_tool()]) as h:
            h.fake.script(fa.text("one"), fa.text("two"))
            first = await h.agent.run("first")
            second = await h.agent.run("second")
            r0, r1 = h.fake.requests
            assert r0["system"] == r1["system"] == [
                {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "5m"}}
            ]
            assert r0["tools"] == r1["tools"] and r0["tools"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "5m"}
            assert r0["cache_control"] == {"type": "ephemeral", "ttl": "5m"}
            assert first.usage.cache_write > 0 and first.usage.cache_read == 0
            assert second.usage.cache_read >= first.usage.cache_write
            usages = [e["usage"] for e in h.session.entries if e["type"] == "message" and "usage" in e]
            assert len(usages) == 2 and usages[1]["cache_read"] > 0
            run_ends = [e for e in h.session.entries if e.get("custom_type") == "run_end"]
            assert [e["data"]["outcome"] for e in run_ends] == ["ok", "ok"]

    arun(body())


def test_thinking_blocks_are_kept_for_replay(tmp_path: Path) -> None:
    """A thinking block is persisted with its signature and replayed in the next request."""

    async def body() -> None:
        async with harness(tmp_path) as h:
            h.fake.script(fa.thinking("hmm", "answer", pings=2), fa.text("again"))
            assert (await h.agent.run("q1")).text == "answer"
            await h.agent.run("q2")
            replay = h.fake.requests[1]["messages"][1]["content"]
            assert replay[0] == {"type": "thinking", "thinking": "hmm", "signature": "sig-fake"}

    arun(body())


def test_run_uses_the_callers_run_id(tmp_path: Path) -> None:
    """run(run_id=...) names the run in its outcome, its events and its run_end record; without one an id is minted."""

    async def body() -> None:
        async with harness(tmp_path) as h:
            h.fake.script(fa.text("one"), fa.text("two"))
            outcome = await h.agent.run("hi", run_id="captain-run-1")
            assert outcome.run_id == "captain-run-1"
            assert {e.run_id for e in h.events} == {"captain-run-1"}
            ends = [e["data"]["run_id"] for e in h.session.entries if e.get("custom_type") == "run_end"]
            assert ends == ["captain-run-1"]
            minted = await h.agent.run("again")
            assert minted.run_id not in ("captain-run-1", "") and len(minted.run_id) == 12

    arun(body())
