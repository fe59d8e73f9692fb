"""Building the runtime from settings, and what happens to steers when a run fails."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from clankie.settings import load
from clankie.testing import fake_anthropic as fa
from clankie.testing.clock import FakeClock
from service.agent.agent import AgentConfig
from service.agent.content import UnsupportedImage, UserMessage
from service.agent.outcome import OutcomeKind
from service.agent.provider import AnthropicProvider, ProviderUnconfigured
from tests.service.agent.helpers import arun, harness


def test_provider_and_config_from_settings(tmp_path: Path) -> None:
    """Settings give the provider its key, base URL and model, and the config its window; no key is refused."""
    env = {
        "CLANKIE_STATE": str(tmp_path),
        "ANTHROPIC_API_KEY": "sk-test",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
        "CLANKIE_MODEL": "m-1",
        "CLANKIE_MODEL_CONTEXT_WINDOW": "50000",
    }
    settings = load(env)

    async def body() -> None:
        provider = AnthropicProvider.from_settings(settings)
        assert provider.model == "m-1"
        await provider.aclose()

    arun(body())
    assert AgentConfig.from_settings(settings).context_window == 50_000
    with pytest.raises(ProviderUnconfigured):
        AnthropicProvider.from_settings(load({"CLANKIE_STATE": str(tmp_path)}))


def test_steer_into_a_failing_run_is_kept_in_the_tree(tmp_path: Path) -> None:
    """A message steered into a run that then fails is persisted, so the next run still sees it."""

    async def body() -> None:
        gate = asyncio.Event()
        async with harness(tmp_path, clock=FakeClock(autojump=True)) as h:
            h.fake.script(fa.text("x", stall_after=1, stall_until=gate, error_after=2, error_type="api_error"))
            h.fake.script(*[fa.server_error()] * 3)
            run = asyncio.create_task(h.agent.run("first"))
            await h.fake.wait_for_requests(1)
            h.agent.steer("second")
            gate.set()
            outcome = await run
            assert outcome.kind is OutcomeKind.MODEL_FAILED
            h.fake.script(fa.text("ok"))
            await h.agent.run("third")
            texts = [b["text"] for b in h.fake.requests[-1]["messages"][0]["content"]]
            assert texts == ["first", "second", "third"]

    arun(body())


def test_unreadable_image_is_refused_before_anything_is_persisted(tmp_path: Path) -> None:
    """run() with a non-image attachment raises at once and leaves the agent idle and the tree empty."""
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")

    async def body() -> None:
        async with harness(tmp_path) as h:
            with pytest.raises(UnsupportedImage):
                await h.agent.run(UserMessage(text="see", images=(bad,)))
            assert not h.agent.is_running and h.session.entries == []

    arun(body())
