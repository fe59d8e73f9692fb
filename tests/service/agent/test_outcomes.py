"""Every failure scenario maps to the right outcome; retry timing runs on a fake clock."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from clankie.testing import fake_anthropic as fa
from clankie.testing.clock import FakeClock
from service.agent.agent import Agent
from service.agent.events import AgentEvent, ProviderWait, RetryEnd, RetryStart, RunEnd
from service.agent.model import ModelRequest, ModelResponse, Signal
from service.agent.outcome import OutcomeKind
from service.agent.provider import AnthropicProvider
from tests.service.agent.helpers import SYSTEM, arun, harness

MIDSTREAM = fa.text("partial answer here", error_after=3)
DISCONNECT = fa.text("partial answer here", disconnect_after=3)

CASES = [
    # (id, script, outcome, requests made)
    ("spend_limit_429", [fa.spend_limit()], OutcomeKind.USAGE_LIMIT, 1),
    ("billing_402", [fa.Failure(status=402, error_type="billing_error", message="pay")], OutcomeKind.USAGE_LIMIT, 1),
    ("legacy_usage_text", [fa.legacy_usage_limit()], OutcomeKind.USAGE_LIMIT, 1),
    ("overloaded_529_x4", [fa.overloaded()] * 4, OutcomeKind.MODEL_FAILED, 4),
    ("server_500_x4", [fa.server_error()] * 4, OutcomeKind.MODEL_FAILED, 4),
    # a rate limit is waited out in the governor 10 times, then the retry schedule's 3 retries
    ("rate_limited_429_x14", [fa.rate_limited()] * 14, OutcomeKind.MODEL_FAILED, 14),
    ("rate_limited_429_x4_then_ok", [*[fa.rate_limited()] * 4, fa.text("fine")], OutcomeKind.OK, 5),
    ("midstream_error_x4", [MIDSTREAM] * 4, OutcomeKind.MODEL_FAILED, 4),
    ("disconnect_x4", [DISCONNECT] * 4, OutcomeKind.MODEL_FAILED, 4),
    ("bad_request", [fa.Failure(status=400, error_type="invalid_request_error", message="bad")], OutcomeKind.MODEL_FAILED, 1),
    ("retry_after_too_long", [fa.rate_limited(retry_after=3600)], OutcomeKind.MODEL_FAILED, 1),
    ("refusal", [fa.text("no.", stop_reason="refusal")], OutcomeKind.MODEL_FAILED, 1),
    ("cut_before_message_stop", [fa.text("half an ans", cut_after=4)], OutcomeKind.RESPONSE_MISSING, 1),
    ("no_message_delta", [fa.text("whole", stop_reason=None)], OutcomeKind.RESPONSE_MISSING, 1),
    ("empty_text", [fa.text("")], OutcomeKind.RESPONSE_MISSING, 1),
    ("thinking_only", [fa.thinking("I ponder", "")], OutcomeKind.RESPONSE_MISSING, 1),
    ("overloaded_then_ok", [fa.overloaded(), fa.server_error(), fa.text("fine")], OutcomeKind.OK, 3),
    ("midstream_then_ok", [MIDSTREAM, fa.text("fine")], OutcomeKind.OK, 2),
    ("ramp_limit_then_ok", [fa.rate_limited(error_code="ramp_limit_exceeded"), fa.text("fine")], OutcomeKind.OK, 2),
]


@pytest.mark.parametrize(("script", "expected", "requests"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_failure_scenario_maps_to_outcome(
    tmp_path: Path, script: list[fa.Scenario], expected: OutcomeKind, requests: int
) -> None:
    """Each scripted provider behaviour ends the run in its classified outcome after the right number of calls."""

    async def body() -> None:
        async with harness(tmp_path, clock=FakeClock(autojump=True)) as h:
            h.fake.script(*script)
            outcome = await h.agent.run("hi")
            assert outcome.kind is expected
            assert len(h.fake.requests) == requests
            if expected is not OutcomeKind.OK:
                assert outcome.text == ""
            assert not h.agent.is_running

    arun(body())


def test_provider_error_text_stays_in_the_tree(tmp_path: Path) -> None:
    """The provider's error message is recorded in the session tree and not in the outcome."""

    async def body() -> None:
        async with harness(tmp_path, clock=FakeClock(autojump=True)) as h:
            h.fake.script(fa.legacy_usage_limit())
            outcome = await h.agent.run("hi")
            assert "regain access" not in repr(outcome)
            errors = [e for e in h.session.entries if e.get("custom_type") == "provider_error"]
            assert len(errors) == 1 and "regain access" in errors[0]["data"]["detail"]
            assert errors[0]["data"]["kind"] == "usage_limit"

    arun(body())


def test_retry_waits_2_4_8_seconds_then_gives_up(tmp_path: Path) -> None:
    """Transient failures are retried after 2, 4 and 8 s of clock time, with retry events, then fail."""

    async def body() -> None:
        clock = FakeClock(autojump=True)
        async with harness(tmp_path, clock=clock) as h:
            h.fake.script(*[fa.overloaded()] * 4)
            outcome = await h.agent.run("hi")
            assert outcome.kind is OutcomeKind.MODEL_FAILED
            assert clock.slept == [2.0, 4.0, 8.0]
            assert [(e.attempt, e.delay) for e in h.of(RetryStart)] == [(1, 2.0), (2, 4.0), (3, 8.0)]
            assert [(e.attempt, e.success) for e in h.of(RetryEnd)] == [(3, False)]

    arun(body())


def test_a_rate_limit_is_waited_out_in_the_governor_for_its_retry_after(tmp_path: Path) -> None:
    """A 429 with retry-after 30 s waits 30 s (not the schedule's 2 s), told to the run as a paced wait, then succeeds."""

    async def body() -> None:
        clock = FakeClock(autojump=True)
        async with harness(tmp_path, clock=clock) as h:
            h.fake.script(fa.rate_limited(retry_after=30), fa.text("after the wait"))
            outcome = await h.agent.run("hi")
            assert outcome.text == "after the wait"
            assert clock.slept == [30.0]
            assert h.of(RetryStart) == []  # the schedule was not spent
            assert [e.waiting for e in h.of(ProviderWait)] == [True, False]

    arun(body())


def test_retry_wait_is_real_clock_time_not_wall_sleep(tmp_path: Path) -> None:
    """Without the clock advancing, the retry waits; advancing 2 s releases exactly the first retry."""

    async def body() -> None:
        import asyncio

        clock = FakeClock()
        async with harness(tmp_path, clock=clock) as h:
            h.fake.script(fa.overloaded(), fa.text("ok now"))
            run = asyncio.create_task(h.agent.run("hi"))
            await h.wait_event(lambda e: isinstance(e, RetryStart))
            clock.advance(1.9)
            await asyncio.sleep(0.05)  # sleep: the retry must not go out in this window (0.1 s early)
            assert len(h.fake.requests) == 1
            clock.advance(0.1)
            assert (await run).text == "ok now"
            assert len(h.fake.requests) == 2

    arun(body())


def test_sdk_retries_are_off(tmp_path: Path) -> None:
    """A single 529 costs exactly one HTTP request before the runtime's own retry."""

    async def body() -> None:
        async with harness(tmp_path, clock=FakeClock(autojump=True)) as h:
            h.fake.script(fa.Failure(status=529, error_type="overloaded_error", message="busy", headers={"x-should-retry": "true"}), fa.text("ok"))
            await h.agent.run("hi")
            assert len(h.fake.requests) == 2
            assert json.dumps(h.fake.requests[0]) == json.dumps(h.fake.requests[1])

    arun(body())


def test_stalled_stream_hits_the_read_timeout_and_fails_after_retries(tmp_path: Path) -> None:
    """A stream that goes silent past the SDK read timeout is a connection failure: retried, then model_failed."""

    async def body() -> None:
        clock = FakeClock(autojump=True)
        async with harness(tmp_path, clock=clock, read_timeout=0.2) as h:
            h.fake.script(*[fa.text("silence", stall_after=2)] * 4)
            outcome = await h.agent.run("hi")
            assert outcome.kind is OutcomeKind.MODEL_FAILED
            assert len(h.fake.requests) == 4 and clock.slept == [2.0, 4.0, 8.0]

    arun(body())


def test_an_undecodable_stream_is_a_model_failure_and_the_next_run_works(tmp_path: Path) -> None:
    """A stream with a data line that is not JSON ends the run model_failed, unretried, and the lane answers the next message."""

    async def body() -> None:
        async with harness(tmp_path, clock=FakeClock(autojump=True)) as h:
            h.fake.script(fa.text("partial answer here", garbage_after=3), fa.text("fine"))
            outcome = await h.agent.run("hi")
            assert outcome.kind is OutcomeKind.MODEL_FAILED
            assert len(h.fake.requests) == 1
            [end] = h.of(RunEnd)
            assert end.outcome.kind is OutcomeKind.MODEL_FAILED
            errors = [e["data"] for e in h.session.entries if e.get("custom_type") == "provider_error"]
            assert [(e["kind"], e["detail"]) for e in errors] == [("fatal", "JSONDecodeError")]
            again = await h.agent.run("once more")
            assert again.kind is OutcomeKind.OK and again.text == "fine"

    arun(body())


class BuggyProvider:
    """The real provider, except that its first call fails with an error nothing classifies."""

    def __init__(self, real: AnthropicProvider) -> None:
        self._real = real
        self.calls = 0

    @property
    def model(self) -> str:
        return self._real.model

    @property
    def server(self) -> tuple[str, int] | None:
        return self._real.server

    async def complete(self, request: ModelRequest, on_signal: Callable[[Signal], None]) -> ModelResponse:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError(json.dumps(request.messages[-1]))  # an error that quotes the user
        return await self._real.complete(request, on_signal)

    async def aclose(self) -> None:
        await self._real.aclose()


def test_an_unexpected_error_ends_the_run_model_failed_and_the_lane_keeps_working(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An error nothing classified still ends the run (RunEnd, run_end entry), is logged without its text, and the next run works."""

    async def body() -> None:
        async with harness(tmp_path, clock=FakeClock(autojump=True)) as h:
            agent = Agent(session=h.session, provider=BuggyProvider(h.provider), tools=(), clock=h.clock, system_prompt=SYSTEM)
            events: list[AgentEvent] = []
            agent.subscribe(events.append)
            outcome = await agent.run("secret user words")
            assert outcome.kind is OutcomeKind.MODEL_FAILED and not agent.is_running
            assert [e.outcome.kind for e in events if isinstance(e, RunEnd)] == [OutcomeKind.MODEL_FAILED]
            ends = [e["data"]["outcome"] for e in h.session.entries if e.get("custom_type") == "run_end"]
            assert ends == ["model_failed"]
            h.fake.script(fa.text("fine"))
            again = await agent.run("once more")
            assert again.kind is OutcomeKind.OK and again.text == "fine"

    arun(body())
    [error] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert "RuntimeError" in error.getMessage() and "in _drive" in error.getMessage()  # type and traceback
    assert "secret user words" not in error.getMessage() and error.exc_info is None
