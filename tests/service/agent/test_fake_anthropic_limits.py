"""The fake Anthropic's rate limits, seen through the real SDK: headers on every answer, 429s as the API sends them."""

from __future__ import annotations

from datetime import datetime

import anthropic
import pytest
from anthropic.types import MessageParam

from clankie.testing.clock import FakeClock
from clankie.testing.fake_anthropic import FakeAnthropic, RateLimits
from clankie.testing.fake_anthropic_limits import Bucket, Limiter
from tests.service.agent.helpers import arun

HELLO: list[MessageParam] = [{"role": "user", "content": "hello"}]


def _client(fake: FakeAnthropic) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key="k", base_url=fake.base_url, max_retries=0)


def _reset(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def test_a_bucket_refills_continuously_up_to_its_limit() -> None:
    """Ten per ten seconds: empty after ten, one more every second, never above ten."""
    bucket = Bucket(10, 10.0, now=0.0)
    bucket.take(10, now=0.0)
    assert bucket.wait(1, now=0.0) == pytest.approx(1.0)
    assert bucket.level(now=2.5) == pytest.approx(2.5)
    assert bucket.full_in(now=2.5) == pytest.approx(7.5)
    assert bucket.level(now=100.0) == 10


def test_answers_carry_the_buckets_and_the_request_past_the_limit_gets_the_apis_429() -> None:
    """Three requests per 30 s: remaining counts down 2, 1, 0; the fourth is a 429 rate_limit_error with retry-after."""

    async def body() -> None:
        clock = FakeClock()
        async with FakeAnthropic(limits=RateLimits(requests=3, window=30.0), clock=clock) as fake:
            client = _client(fake)
            remaining = []
            for _ in range(3):
                raw = await client.messages.with_raw_response.create(model="m", max_tokens=16, messages=HELLO)
                assert raw.headers["anthropic-ratelimit-requests-limit"] == "3"
                remaining.append(raw.headers["anthropic-ratelimit-requests-remaining"])
            assert remaining == ["2", "1", "0"]
            full_at = _reset(raw.headers["anthropic-ratelimit-requests-reset"])
            assert full_at == pytest.approx(clock.wall() + 30.0, abs=1.0)
            with pytest.raises(anthropic.RateLimitError) as refused:
                await client.messages.create(model="m", max_tokens=16, messages=HELLO)
            error = refused.value
            assert error.status_code == 429 and error.type == "rate_limit_error"
            assert error.body == {"type": "error", "error": error.body["error"], "request_id": error.request_id}  # type: ignore[index]
            assert error.response.headers["retry-after"] == "10"  # one request refills in 30 / 3 s
            assert error.response.headers["anthropic-ratelimit-requests-remaining"] == "0"
            assert fake.rate_limited == 1
            clock.advance(10.0)
            await client.messages.create(model="m", max_tokens=16, messages=HELLO)
            assert fake.rate_limited == 1
            await client.close()

    arun(body())


def test_token_limits_refuse_a_prompt_larger_than_what_is_left_and_report_the_tightest() -> None:
    """Input tokens are charged on arrival; output tokens when answered; the tokens-* headers name the tighter bucket."""
    limiter = Limiter(RateLimits(input_tokens=1000, output_tokens=100, window=60.0), now=0.0)
    assert limiter.admit(900, now=0.0) is None
    limiter.answered(95, now=0.0)
    headers = limiter.headers(now=0.0, wall=1_800_000_000.0)
    assert headers["anthropic-ratelimit-input-tokens-remaining"] == "100"
    assert headers["anthropic-ratelimit-output-tokens-remaining"] == "5"
    assert headers["anthropic-ratelimit-tokens-remaining"] == "5"  # 5 % of output left is tighter than 10 % of input
    refused = limiter.admit(500, now=0.0)
    assert refused is not None and refused.bucket == "input-tokens"
    assert refused.wait == pytest.approx(400 / (1000 / 60.0))
    retry, message = limiter.refusal(refused, now=0.0, wall=1_800_000_000.0)
    assert retry["retry-after"] == "24" and "1000 input tokens per 60 seconds" in message
    assert headers["anthropic-ratelimit-input-tokens-reset"].endswith("Z")
