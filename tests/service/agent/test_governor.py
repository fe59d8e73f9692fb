"""The provider governor: one pace for every lane, learned from the answers' rate-limit headers; a 429 slows everyone."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clankie.testing import fake_anthropic as fa
from clankie.testing.clock import FakeClock
from clankie.testing.fake_anthropic import FakeAnthropic, RateLimits
from service.agent.agent import Agent
from service.agent.events import AgentEvent, ProviderWait
from service.agent.governor import Governor
from service.agent.outcome import OutcomeKind
from service.agent.pacing import Pacing, Report, reports
from service.agent.provider import AnthropicProvider
from service.agent.session import SessionTree
from tests.polling import until
from tests.service.agent.helpers import SYSTEM, arun

WALL = 1_800_000_000.0


def _headers(limit: int, remaining: int, reset: str) -> dict[str, str]:
    return {
        "anthropic-ratelimit-requests-limit": str(limit),
        "anthropic-ratelimit-requests-remaining": str(remaining),
        "anthropic-ratelimit-requests-reset": reset,
    }


# ------------------------------------------------------------------ the pure core


def test_headers_become_reports_and_malformed_buckets_are_left_out() -> None:
    """Limit, remaining and an RFC 3339 reset per bucket; a bucket with a bad number is ignored, not guessed."""
    headers = {
        **_headers(50, 12, "2027-01-15T08:00:10Z"),
        "anthropic-ratelimit-input-tokens-limit": "lots",
        "anthropic-ratelimit-input-tokens-remaining": "10",
        "anthropic-ratelimit-output-tokens-limit": "8000",
        "anthropic-ratelimit-output-tokens-remaining": "7000",
    }
    parsed = reports(headers)
    assert set(parsed) == {"requests", "output-tokens"}
    assert parsed["requests"] == Report(limit=50, remaining=12, reset=1_800_000_010.0)
    assert parsed["output-tokens"].reset is None


def test_an_empty_bucket_paces_calls_at_its_refill_rate() -> None:
    """50 requests refilled over 10 s: from empty, the next call may go in 0.2 s, and each one started costs 0.2 s more."""
    pacing = Pacing()
    seq = pacing.start()
    pacing.learn(seq, {"requests": Report(limit=50, remaining=0, reset=WALL + 10)}, now=100.0, wall=WALL)
    assert pacing.delay(100.0) == pytest.approx(0.2)
    assert pacing.delay(100.2) == pytest.approx(0.0)
    pacing.start()
    assert pacing.delay(100.2) == pytest.approx(0.2)  # the call just started is counted against the bucket


def test_calls_started_after_a_report_count_against_it_and_older_news_is_ignored() -> None:
    """A report of 2 left, then two calls start: the third waits; a late answer to an earlier call changes nothing."""
    pacing = Pacing()
    first, second = pacing.start(), pacing.start()
    pacing.learn(second, {"requests": Report(limit=10, remaining=2, reset=WALL + 8)}, now=0.0, wall=WALL)
    pacing.start()
    pacing.start()
    assert pacing.delay(0.0) > 0
    pacing.learn(first, {"requests": Report(limit=10, remaining=9, reset=WALL + 1)}, now=0.0, wall=WALL)
    assert pacing.delay(0.0) > 0


def test_a_429_pauses_every_call_for_its_retry_after_or_until_the_dry_bucket_refills() -> None:
    pacing = Pacing()
    assert pacing.throttle(30.0, now=0.0) == 30.0
    assert pacing.delay(29.0) == pytest.approx(1.0)
    assert pacing.delay(30.0) == 0.0
    seq = pacing.start()
    pacing.learn(seq, {"requests": Report(limit=5, remaining=0, reset=WALL + 12)}, now=40.0, wall=WALL)
    assert pacing.throttle(None, now=40.0) == pytest.approx(12.0)  # no retry-after: the empty bucket's reset
    assert pacing.throttled == 2


def test_token_buckets_are_paced_by_what_calls_have_cost() -> None:
    """After answers costing about 3,000 input tokens, a bucket with 1,000 left holds the next call until it refills."""
    pacing = Pacing()
    pacing.spent(3000, 50)
    seq = pacing.start()
    pacing.learn(seq, {"input-tokens": Report(limit=60_000, remaining=1000, reset=WALL + 59)}, now=0.0, wall=WALL)
    assert pacing.cost().input_tokens == 3000
    assert pacing.delay(0.0) == pytest.approx(2000 / (59_000 / 59))


# ------------------------------------------------------------------ agents sharing one governor


@contextlib.asynccontextmanager
async def agents(tmp_path: Path, fake: FakeAnthropic, clock: FakeClock, governor: Governor,
                 count: int) -> AsyncIterator[tuple[list[Agent], list[AgentEvent]]]:
    provider = AnthropicProvider(api_key="test", model="fake-model", base_url=fake.base_url)
    trees = [SessionTree.create(tmp_path / f"lane{i}", clock) for i in range(count)]
    out = [Agent(session=t, provider=provider, tools=(), clock=clock, system_prompt=SYSTEM, governor=governor) for t in trees]
    events: list[AgentEvent] = []
    for agent in out:
        agent.subscribe(events.append)
    try:
        yield out, events
    finally:
        await provider.aclose()
        for tree in trees:
            tree.close()


def test_forty_lanes_at_once_stay_under_the_accounts_limit_and_all_answer(tmp_path: Path) -> None:
    """Forty runs against 10 requests per 10 s, four calls at a time: all answered, the pace kept, at most a few 429s."""

    async def body() -> None:
        clock = FakeClock(autojump=True)
        async with FakeAnthropic(limits=RateLimits(requests=10, window=10.0), clock=clock) as fake:
            governor = Governor(clock, max_concurrent=4)
            async with agents(tmp_path, fake, clock, governor, 40) as (lanes, _):
                start = clock.monotonic()
                outcomes = await asyncio.gather(*(a.run(f"hello {i}") for i, a in enumerate(lanes)))
                assert [o.kind for o in outcomes] == [OutcomeKind.OK] * 40
                assert fake.rate_limited <= 2
                assert clock.monotonic() - start >= (40 - 10) * 1.0 * 0.9  # 30 beyond the first ten, one a second

    arun(body())


def test_a_429_with_retry_after_pauses_every_run_not_only_its_own(tmp_path: Path) -> None:
    """One run gets a 429 with retry-after 30 s; another run's call waits those 30 s too, and both answer after."""

    async def body() -> None:
        clock = FakeClock()
        async with FakeAnthropic() as fake:
            fake.script(fa.rate_limited(retry_after=30), fa.text("first"), fa.text("second"))
            governor = Governor(clock, max_concurrent=8)
            async with agents(tmp_path, fake, clock, governor, 2) as ((a, b), events):
                first = asyncio.create_task(a.run("one"))
                await fake.wait_for_requests(1)
                await until(lambda: governor.pacing.throttled > 0 or None, what="the 429 to pause the governor")
                second = asyncio.create_task(b.run("two"))
                await until(lambda: sum(isinstance(e, ProviderWait) and e.waiting for e in events) >= 2 or None,
                            what="both runs to be told they wait")
                assert governor.status().waiting == 2 and governor.status().paused_s == 30.0
                clock.advance(29.0)
                await asyncio.sleep(0.1)  # sleep: neither call may go out in this window (1 s early)
                assert len(fake.requests) == 1
                clock.advance(1.0)
                assert {(await first).text, (await second).text} == {"first", "second"}
                assert len(fake.requests) == 3

    arun(body())


def test_an_aborted_run_leaves_the_governors_queue(tmp_path: Path) -> None:
    """A run aborted while its call waits for a slot frees its place and is told it is no longer paced."""

    async def body() -> None:
        clock = FakeClock()
        hold = asyncio.Event()
        async with FakeAnthropic() as fake:
            fake.script(fa.text("held", stall_after=1, stall_until=hold), fa.text("later"))
            governor = Governor(clock, max_concurrent=1)
            async with agents(tmp_path, fake, clock, governor, 2) as ((a, b), events):
                first = asyncio.create_task(a.run("one"))
                await fake.wait_for_requests(1)
                second = asyncio.create_task(b.run("two"))
                await until(lambda: governor.status().waiting > 0 or None, what="the second call to wait for a slot")
                b.abort("operator")
                assert (await second).kind is OutcomeKind.ABORTED
                assert governor.status().waiting == 0
                assert [e.waiting for e in events if isinstance(e, ProviderWait)] == [True, False]
                hold.set()
                assert (await first).text == "held"

    arun(body())
