"""The demo model drives the real agent runtime: it picks a plan by keyword and calls the tools one by one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clankie.protocol import Author, Trigger
from clankie.testing.clock import FakeClock
from hosts.tldraw.schema_er import parse_er
from hosts.tldraw.schema_sequence import parse_sequence
from service.agent.agent import Agent
from service.agent.demo import (
    DEMO_LONG_URL,
    DEMO_MARK,
    DEMO_REPLY,
    DEMO_URL,
    ER_SPEC,
    SEQUENCE_SPEC,
    TEXT_UPDATE,
    DemoProvider,
    plan_for,
    trigger_text,
)
from service.agent.outcome import OutcomeKind
from service.agent.session import SessionTree
from service.agent.tools import Tool, ToolContext, ToolResult
from service.captain.lanes.prompt import trigger_block
from service.captain.tools.model_tools import ER_SCHEMA, SEQUENCE_SCHEMA
from tests.service.agent.helpers import arun

DIGEST = "ab" * 32
REF = f"sha256:{DIGEST}:browser/{DIGEST}.png"
SCHEMA: dict[str, Any] = {"type": "object"}


class Recorder:
    """Stand-in tools that record each call; ``fail`` names tools that answer with an error result."""

    def __init__(self, fail: tuple[str, ...] = ()) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail = fail

    def tool(self, name: str) -> Tool:
        async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            self.calls.append((name, args))
            if name in self.fail:
                return ToolResult(content="browser_unavailable: the browser host is not available", is_error=True)
            if name == "send_text_update":
                return ToolResult(content="I posted that text update.")
            return ToolResult(content=[{"type": "text", "text": f"Screenshot ready ({REF}). It will be attached."}])

        return Tool(name=name, description=name, input_schema=SCHEMA, execute=execute)

    def tools(self) -> list[Tool]:
        return [self.tool(n) for n in ("send_text_update", "browser_screenshot", "draw_er_diagram", "draw_sequence_diagram")]


def run(tmp_path: Path, text: str, recorder: Recorder) -> tuple[OutcomeKind, str]:
    clock = FakeClock()

    async def body() -> tuple[OutcomeKind, str]:
        agent = Agent(session=SessionTree.create(tmp_path / "lane", clock), provider=DemoProvider(tmp_path / "root"),
                      tools=recorder.tools(), clock=clock, system_prompt="demo")
        outcome = await agent.run(text)
        return outcome.kind, outcome.text

    return arun(body())


def test_a_long_task_posts_its_text_update_then_photographs_the_slow_page(tmp_path: Path) -> None:
    """``long task``: send_text_update, then a screenshot of the demo's slow page, then a reply that says it is a
    demo and names the file the host wrote."""
    rec = Recorder()
    kind, text = run(tmp_path, "please do a LONG task", rec)
    assert kind is OutcomeKind.OK
    assert rec.calls == [("send_text_update", {"text": TEXT_UPDATE}), ("browser_screenshot", {"url": DEMO_LONG_URL})]
    assert text.startswith(DEMO_MARK) and f"(written to {tmp_path / 'root' / 'browser' / DIGEST}.png)" in text


def test_each_keyword_picks_its_tool_and_anything_else_gets_the_canned_answer(tmp_path: Path) -> None:
    """Screenshot, sequence and ER diagrams are one call each; a plain greeting calls nothing."""
    cases = {"take a screenshot": ("browser_screenshot", {"url": DEMO_URL}),
             "draw the sequence": ("draw_sequence_diagram", SEQUENCE_SPEC),
             "a diagram please": ("draw_er_diagram", ER_SPEC)}
    for i, (said, call) in enumerate(cases.items()):
        rec = Recorder()
        kind, text = run(tmp_path / str(i), said, rec)
        assert kind is OutcomeKind.OK and rec.calls == [call] and DEMO_MARK in text
    rec = Recorder()
    assert run(tmp_path / "hi", "hi there", rec) == (OutcomeKind.OK, DEMO_REPLY) and rec.calls == []
    assert DEMO_MARK in DEMO_REPLY


def test_a_host_that_fails_is_reported_in_the_reply_not_hidden(tmp_path: Path) -> None:
    """A tool's error result reaches the reply (the words still say it is a demo)."""
    rec = Recorder(fail=("browser_screenshot",))
    kind, text = run(tmp_path, "screenshot", rec)
    assert kind is OutcomeKind.OK and DEMO_MARK in text
    assert "browser_screenshot did not work out: browser_unavailable" in text and "written to" not in text


def test_the_trigger_is_read_from_the_framed_prompt_not_its_framing() -> None:
    """Keywords come from what the person said (the trigger's JSON string), so the framing cannot pick a plan."""
    trigger = Trigger(message_id="1", author=Author(id="5", name="p"), text='draw "it"\nnow', at=0.0)
    framed = "Respond to the page screenshot framing.\n\n" + trigger_block(trigger)
    assert trigger_text({"role": "user", "content": [{"type": "text", "text": framed}]}) == 'draw "it"\nnow'
    assert plan_for(trigger_text({"role": "user", "content": [{"type": "text", "text": framed}]}))[0].tool == "draw_er_diagram"


def test_the_demo_diagrams_are_what_the_tldraw_host_accepts() -> None:
    """The demo's diagram specs parse with the tldraw host's own parsers, and use only the fields the tools offer."""
    er, seq = parse_er(json.loads(json.dumps(ER_SPEC))), parse_sequence(json.loads(json.dumps(SEQUENCE_SPEC)))
    assert len(er.entities) == 4 and len(seq.messages) == 6
    assert set(ER_SPEC) <= set(ER_SCHEMA["properties"]) and set(SEQUENCE_SPEC) <= set(SEQUENCE_SCHEMA["properties"])
