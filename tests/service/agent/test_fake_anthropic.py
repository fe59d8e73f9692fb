"""The fake Anthropic server itself: cache-aware usage, signs of life, request log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clankie.testing import fake_anthropic as fa
from clankie.testing.clock import FakeClock
from clankie.testing.fake_anthropic_cache import PromptCache, estimate_tokens
from service.agent.events import StreamProgress, TextDelta
from tests.service.agent.helpers import arun, harness


def _body(cache: bool, messages: list[dict[str, Any]]) -> dict[str, Any]:
    system: dict[str, Any] = {"type": "text", "text": "S" * 400}
    body: dict[str, Any] = {"model": "m", "system": [system], "messages": messages}
    if cache:
        system["cache_control"] = {"type": "ephemeral"}
        body["cache_control"] = {"type": "ephemeral"}
    return body


def test_usage_responds_to_cache_control_and_prefix_reuse() -> None:
    """Breakpoints write the prefix, a repeated prefix reads it, and without cache_control all input is uncached."""
    cache = PromptCache()
    one = [{"role": "user", "content": "hello " * 50}]
    two = [*one, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "again " * 50}]
    first = cache.usage(_body(True, one))
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 0
    second = cache.usage(_body(True, two))
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    plain = PromptCache().usage(_body(False, two))
    assert plain["cache_read_input_tokens"] == plain["cache_creation_input_tokens"] == 0
    total = second["input_tokens"] + second["cache_read_input_tokens"] + second["cache_creation_input_tokens"]
    assert plain["input_tokens"] == total
    changed = cache.usage(_body(True, [{"role": "user", "content": "other " * 50}]))
    assert changed["cache_read_input_tokens"] < first["cache_creation_input_tokens"]


def _ttl_body(prefix_ttl: str, ttl: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    system = {"type": "text", "text": "S" * 400, "cache_control": {"type": "ephemeral", "ttl": prefix_ttl}}
    return {"model": "m", "system": [system], "messages": messages, "cache_control": {"type": "ephemeral", "ttl": ttl}}


def test_cache_entries_live_for_their_lifetime_and_reads_refresh_them() -> None:
    """A 5m entry is read within 5 minutes and gone after; a 1h entry outlives it; a read starts its lifetime again."""
    clock = FakeClock()
    cache = PromptCache(now=clock.monotonic)
    one = [{"role": "user", "content": "hello " * 50}]
    first = cache.usage(_ttl_body("5m", "5m", one))
    assert first["cache_creation"] == {"ephemeral_5m_input_tokens": first["cache_creation_input_tokens"],
                                       "ephemeral_1h_input_tokens": 0}
    clock.advance(299)
    assert cache.usage(_ttl_body("5m", "5m", one))["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    clock.advance(299)  # 598 s after the write, 299 s after the read that refreshed it
    assert cache.usage(_ttl_body("5m", "5m", one))["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    clock.advance(301)
    expired = cache.usage(_ttl_body("5m", "5m", one))
    assert expired["cache_read_input_tokens"] == 0 and expired["cache_creation_input_tokens"] > 0


def test_writes_are_billed_per_breakpoint_lifetime() -> None:
    """A 1h system prompt and a 5m conversation: each part is written with its own lifetime, and the 1h part
    is still read after the 5m part expired."""
    clock = FakeClock()
    cache = PromptCache(now=clock.monotonic)
    one = [{"role": "user", "content": "hello " * 50}]
    first = cache.usage(_ttl_body("1h", "5m", one))
    made = first["cache_creation"]
    system = estimate_tokens({"type": "text", "text": "S" * 400})
    assert made["ephemeral_1h_input_tokens"] == system
    assert made["ephemeral_5m_input_tokens"] == first["cache_creation_input_tokens"] - system > 0
    clock.advance(1800)
    later = cache.usage(_ttl_body("1h", "5m", one))
    assert later["cache_read_input_tokens"] == system
    assert later["cache_creation"] == {"ephemeral_5m_input_tokens": made["ephemeral_5m_input_tokens"],
                                       "ephemeral_1h_input_tokens": 0}


def test_a_longer_lifetime_after_a_shorter_one_is_refused(tmp_path: Path) -> None:
    """As the API: a 1h breakpoint after a 5m one (or an unknown lifetime) is refused; the server answers it 400."""
    from clankie.testing.fake_anthropic_cache import ttl_order_error

    assert ttl_order_error(_ttl_body("1h", "5m", [{"role": "user", "content": "x"}])) is None
    assert ttl_order_error(_ttl_body("5m", "1h", [{"role": "user", "content": "x"}])) is not None
    assert ttl_order_error(_ttl_body("1h", "2h", [{"role": "user", "content": "x"}])) is not None


def test_every_streamed_event_is_a_sign_of_life(tmp_path: Path) -> None:
    """Each SSE event the SDK yields becomes an agent event, and last_event_at follows the clock."""

    async def body() -> None:
        clock = FakeClock()
        async with harness(tmp_path, clock=clock) as h:
            h.fake.script(fa.text("abcdefghijklmnopqrstuvwxyz", chunk_size=5, pings=3))
            await h.agent.run("hi")
            whats = [e.what for e in h.of(StreamProgress)]
            assert whats[0] == "message_start" and whats[-1] == "message_stop"
            assert "ping" not in whats
            assert len(h.of(TextDelta)) == 6
            assert h.agent.last_event_at == clock.boottime()
            assert h.fake.requests[0]["stream"] is True

    arun(body())


def test_unscripted_requests_echo_and_non_stream_returns_json() -> None:
    """With an empty script the fake echoes the last user text; without stream it answers one JSON message."""
    import aiohttp

    async def body() -> None:
        async with fa.FakeAnthropic() as fake, aiohttp.ClientSession() as http:
            payload = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "ping"}]}
            async with http.post(fake.base_url + "/v1/messages", json=payload) as response:
                assert response.status == 200
                message = await response.json()
            assert message["content"] == [{"type": "text", "text": "echo: ping"}]
            assert message["stop_reason"] == "end_turn" and message["usage"]["input_tokens"] > 0
            fake.script(fa.spend_limit())
            async with http.post(fake.base_url + "/v1/messages", json=payload) as response:
                assert response.status == 429
                error = await response.json()
            assert error["error"]["details"]["error_code"] == "enforced_spend_limit_reached"
            assert fake.requests == [payload, payload]

    arun(body())


def test_a_responder_chooses_by_body_and_defers_to_the_script_with_none() -> None:
    """respond_with picks a scenario from the request body; a None answer falls back to the script, then the echo."""
    import aiohttp

    async def body() -> None:
        async with fa.FakeAnthropic() as fake, aiohttp.ClientSession() as http:
            fake.respond_with(lambda b: fa.text("chosen") if "marker" in str(b["messages"]) else None)
            fake.script(fa.text("scripted"))

            async def ask(text: str) -> Any:
                payload = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": text}]}
                async with http.post(fake.base_url + "/v1/messages", json=payload) as response:
                    return (await response.json())["content"][0]["text"]

            assert [await ask("a marker"), await ask("plain"), await ask("plain again")] == ["chosen", "scripted", "echo: plain again"]
            assert len(fake.requests) == 3

    arun(body())
