"""The agent runtime reports through its own port (``service.agent.observe``): with an observer plugged in, a run's
model calls and tool calls each open one span and tell it what the port allows; with none, nothing is kept.

The runtime stands alone here: the test plugs a recording observer straight into the port, with no service module
(no telemetry, no tracer) in between, and drives a real run (the real SDK against the loopback fake)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from clankie.testing import fake_anthropic as fa
from service.agent import observe
from service.agent.observe import ChatSpan, ModelCall, ToolSpan
from service.agent.outcome import OutcomeKind, Usage
from tests.service.agent.helpers import arun, echo_tool, harness


@dataclass
class Told:
    """One span as the observer was told it."""

    opened: tuple[object, ...]
    told: list[tuple[object, ...]] = field(default_factory=list)

    def first_chunk(self, seconds: float) -> None:
        self.told.append(("first_chunk",))

    def answered(self, model: str, usage: Usage, stop_reason: str, response_id: str, seconds: float) -> None:
        self.told.append(("answered", model, usage.output > 0, stop_reason, bool(response_id)))

    def failed(self, code: str, seconds: float) -> None:
        self.told.append(("failed", code))

    def ended(self, is_error: bool) -> None:
        self.told.append(("ended", is_error))


class Recording:
    """An observer that keeps every span it opened, in order."""

    def __init__(self) -> None:
        self.spans: list[Told] = []

    @contextlib.contextmanager
    def chat(self, call: ModelCall) -> Iterator[ChatSpan]:
        self.spans.append(span := Told(("chat", call.model, call.max_tokens, call.server is not None, call.provider)))
        yield span

    @contextlib.contextmanager
    def execute_tool(self, name: str, call_id: str) -> Iterator[ToolSpan]:
        self.spans.append(span := Told(("execute_tool", name, bool(call_id))))
        yield span


@pytest.fixture
def recording() -> Iterator[Recording]:
    observer = Recording()
    before = observe.plug(observer)
    try:
        yield observer
    finally:
        observe.plug(before)


def test_a_run_reports_each_model_call_and_each_tool_call_to_the_plugged_observer(
    tmp_path: Path, recording: Recording
) -> None:
    """A tool round then an answer: chat (answered), execute_tool (ended without error), chat (answered), in order."""

    async def body() -> None:
        async with harness(tmp_path, tools=[echo_tool()]) as h:
            h.fake.script(fa.tool_use(("echo", {"text": "ping"})), fa.text("done"))
            outcome = await h.agent.run("hi")
            assert outcome.kind is OutcomeKind.OK

    arun(body())
    assert [s.opened for s in recording.spans] == [
        ("chat", "fake-model", 4096, True, "anthropic"),
        ("execute_tool", "echo", True),
        ("chat", "fake-model", 4096, True, "anthropic"),
    ]
    chat, tool, last = recording.spans
    assert chat.told == [("first_chunk",), ("answered", "fake-model", True, "tool_use", True)]
    assert tool.told == [("ended", False)]
    assert last.told == [("first_chunk",), ("answered", "fake-model", True, "end_turn", True)]


def test_an_unknown_tool_s_span_ends_with_an_error(tmp_path: Path, recording: Recording) -> None:
    """A call to a tool the run does not have is an error result, and its span says so."""

    async def body() -> None:
        async with harness(tmp_path) as h:
            h.fake.script(fa.tool_use(("nope", {})), fa.text("ok"))
            await h.agent.run("hi")

    arun(body())
    tools = [s for s in recording.spans if s.opened[0] == "execute_tool"]
    assert [(s.opened[1], s.told) for s in tools] == [("nope", [("ended", True)])]


def test_with_no_observer_plugged_a_run_opens_no_span_anywhere(tmp_path: Path) -> None:
    """The default is the absent observer: a whole run with a tool leaves the recording it replaced untouched."""
    replaced = Recording()
    before = observe.plug(replaced)
    observe.plug(observe.UNOBSERVED)
    try:
        async def body() -> None:
            async with harness(tmp_path, tools=[echo_tool()]) as h:
                h.fake.script(fa.tool_use(("echo", {"text": "ping"})), fa.text("done"))
                assert (await h.agent.run("hi")).kind is OutcomeKind.OK

        arun(body())
    finally:
        observe.plug(before)
    assert replaced.spans == []
