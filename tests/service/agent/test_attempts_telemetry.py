"""What a model call tells its ``chat`` span, on the attempts' own clock: the time to the stream's first chunk and the
whole call's, the request's max_tokens, where the call goes, the answer's id, and the conversation of the turn it runs in
(also from a run task the turn started and left running)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from clankie.testing.clock import FakeClock
from service import telemetry
from service.agent.attempts import Attempts, RunFailed
from service.agent.failures import FailureKind, ProviderError
from service.agent.model import ModelRequest, ModelResponse, Signal
from service.agent.outcome import Usage
from service.agent.retry import AGENT_RETRY
from service.agent.session import SessionTree
from service.telemetry import ChatCall, ChatSpan, ToolSpan, TurnSpan
from tests.service.agent.helpers import arun

LANE = "room:clankie:1:2"


@dataclass
class Seen:
    """One chat span as the tracer was told it."""

    call: ChatCall
    told: list[tuple[object, ...]] = field(default_factory=list)

    def first_chunk(self, seconds: float) -> None:
        self.told.append(("first_chunk", seconds))

    def answered(self, model: str, usage: Usage, stop_reason: str, response_id: str, seconds: float) -> None:
        self.told.append(("answered", model, stop_reason, response_id, seconds))

    def failed(self, code: str, seconds: float) -> None:
        self.told.append(("failed", code, seconds))


class Quiet:
    def ended(self, *args: object) -> None:
        return None


class Recording:
    """A tracer that keeps what each chat span was told (a double of :class:`service.otel.OtelTracer`)."""

    def __init__(self) -> None:
        self.chats: list[Seen] = []

    @contextlib.contextmanager
    def invoke_agent(self, agent: str, lane: str, delivery_id: str, model: str) -> Iterator[TurnSpan]:
        yield Quiet()

    @contextlib.contextmanager
    def chat(self, call: ChatCall) -> Iterator[ChatSpan]:
        seen = Seen(call)
        self.chats.append(seen)
        yield seen

    @contextlib.contextmanager
    def execute_tool(self, name: str, call_id: str) -> Iterator[ToolSpan]:
        yield Quiet()

    def shutdown(self) -> None:
        return None


class Streaming:
    """A provider double: its stream's first event comes 0.25 s after the call, the answer 1 s later (fake time)."""

    def __init__(self, clock: FakeClock, fail: bool = False) -> None:
        self.clock, self.fail = clock, fail

    @property
    def model(self) -> str:
        return "claude-test"

    @property
    def server(self) -> tuple[str, int] | None:
        return ("api.example.test", 443)

    async def complete(self, request: ModelRequest, on_signal: Callable[[Signal], None]) -> ModelResponse:
        if self.fail:
            self.clock.advance(0.5)
            raise ProviderError(FailureKind.FATAL, "400 invalid_request_error: ...")
        self.clock.advance(0.25)
        on_signal(Signal(kind="message_start"))
        self.clock.advance(1.0)
        on_signal(Signal(kind="text", text="hi"))
        return ModelResponse(content=[{"type": "text", "text": "hi"}], stop_reason="end_turn", usage=Usage(input=3, output=2),
                             model="claude-test-20990101", id="msg_0001")

    async def aclose(self) -> None:
        return None


@pytest.fixture
def recording() -> Iterator[Recording]:
    tracer = Recording()
    before = telemetry.install(tracer)
    try:
        yield tracer
    finally:
        telemetry.install(before)


def attempts(tmp_path: Path, clock: FakeClock, fail: bool = False) -> Attempts:
    return Attempts(provider=Streaming(clock, fail), session=SessionTree.create(tmp_path, clock), clock=clock,
                    policy=AGENT_RETRY, emit=lambda event: None)


def request() -> ModelRequest:
    return ModelRequest(system="s", messages=[{"role": "user", "content": "hello"}], max_tokens=321)


def test_a_call_in_a_turn_s_run_tells_its_span_the_first_chunk_the_answer_and_the_conversation(
    tmp_path: Path, recording: Recording
) -> None:
    """The run task outlives the turn's span: its call still names that turn's lane (hashed); times are the fake clock's."""
    clock = FakeClock()
    signals: list[Signal] = []

    async def body() -> None:
        with telemetry.invoke_agent("clankie", LANE, "d1", "claude-test"):
            run = asyncio.create_task(attempts(tmp_path, clock).complete("run-1", request, signals.append))
        await run

    arun(body())
    [seen] = recording.chats
    assert seen.call == ChatCall(model="claude-test", max_tokens=321, server=("api.example.test", 443),
                                 conversation=telemetry.lane_hash(LANE))
    assert seen.told == [("first_chunk", 0.25), ("answered", "claude-test-20990101", "end_turn", "msg_0001", 1.25)]
    assert [s.kind for s in signals] == ["message_start", "text"]  # every signal still reaches the run


def test_a_failed_call_outside_any_turn_has_no_conversation_and_no_first_chunk(tmp_path: Path, recording: Recording) -> None:
    """A refusal before any chunk: failed with its kind and the time it took; no conversation is invented."""
    clock = FakeClock()
    with pytest.raises(RunFailed):
        arun(attempts(tmp_path, clock, fail=True).complete("run-2", request, lambda signal: None))
    [seen] = recording.chats
    assert seen.call.conversation is None
    assert seen.told == [("failed", "fatal", 0.5)]
