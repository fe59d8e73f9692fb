"""Per-run caps and the meter: a run is bounded in spend (model calls, tool calls, tokens), never in time."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from clankie.testing import fake_anthropic as fa
from service.agent.agent import CAPPED_RESULT
from service.agent.config import AgentConfig, RunCaps
from service.agent.model import CacheTtl
from service.agent.outcome import OutcomeKind, Usage
from tests.service.agent.helpers import arun, echo_tool, harness


def _always_a_tool(body: dict[str, Any]) -> fa.Scenario:
    """A model that always narrates a little and calls the tool again."""
    n = sum(1 for m in body["messages"] if m["role"] == "assistant") + 1
    return fa.Reply(blocks=[{"type": "text", "text": f"step {n}"},
                            {"type": "tool_use", "id": f"toolu_{n}", "name": "echo", "input": {"text": str(n)}}],
                    stop_reason="tool_use")


@dataclass
class FakeMeter:
    """A meter that refuses once ``spent`` reaches ``budget`` and records what it was told."""

    budget: int = 1 << 40
    lifetime: CacheTtl = "5m"
    charges: list[Usage] = field(default_factory=list)
    asked: int = 0

    def refusal(self) -> OutcomeKind | None:
        self.asked += 1
        spent = sum(u.context_tokens for u in self.charges)
        return OutcomeKind.BUDGET_EXHAUSTED if spent >= self.budget else None

    def lifetimes(self) -> tuple[CacheTtl, CacheTtl]:
        return "1h", self.lifetime

    def tags(self) -> dict[str, object]:
        return {"charged_to": ["user:42"]}

    def charged(self, usage: Usage, model: str, summary: bool) -> None:
        self.charges.append(usage)


def test_a_model_that_always_calls_a_tool_stops_at_the_tool_call_cap_with_the_words_so_far(tmp_path: Path) -> None:
    """Three tool calls run; the fourth is not run (its call is closed in the tree) and the run ends
    RUN_BUDGET_EXCEEDED carrying every word it wrote."""

    async def body() -> None:
        ran: list[str] = []
        config = AgentConfig(caps=RunCaps(max_tool_calls=3))
        async with harness(tmp_path, tools=[echo_tool(log=ran)], config=config) as h:
            h.fake.respond_with(_always_a_tool)
            outcome = await h.agent.run("screenshot these 200 URLs")
            assert outcome.kind is OutcomeKind.RUN_BUDGET_EXCEEDED
            assert outcome.text == "step 1\n\nstep 2\n\nstep 3\n\nstep 4"
            assert ran.count("end echo") == 3 and len(h.fake.requests) == 4
            last = h.session.messages()[-1]["content"][0]
            assert (last["tool_use_id"], last["content"], last["is_error"]) == ("toolu_4", CAPPED_RESULT, True)
            run_end = [e for e in h.session.entries if e.get("custom_type") == "run_end"][-1]
            assert run_end["data"]["outcome"] == "run_budget_exceeded"
            h.fake.respond_with(None)
            h.fake.script(fa.text("fresh run"))
            assert (await h.agent.run("next")).text == "fresh run"  # the cap is per run; the tree stays valid

    arun(body())


@pytest.mark.parametrize(("caps", "requests"), [(RunCaps(max_model_calls=2), 2), (RunCaps(max_tokens=1000), 1)])
def test_model_call_and_token_caps_end_the_run_before_the_next_request(
    tmp_path: Path, caps: RunCaps, requests: int
) -> None:
    """Past the model-call cap, or once the run was billed its token cap, no further request is made."""

    async def body() -> None:
        async with harness(tmp_path, tools=[echo_tool()], config=AgentConfig(caps=caps)) as h:
            h.fake.respond_with(_always_a_tool)
            h.fake.script()
            outcome = await h.agent.run("x " * 2000)
            assert outcome.kind is OutcomeKind.RUN_BUDGET_EXCEEDED
            assert len(h.fake.requests) == requests
            assert outcome.text.startswith("step 1")

    arun(body())


def test_a_spent_budget_makes_no_request(tmp_path: Path) -> None:
    """The meter is asked before every call; once it refuses, the run ends BUDGET_EXHAUSTED without a request."""

    async def body() -> None:
        meter = FakeMeter(budget=1)
        async with harness(tmp_path, meter=meter) as h:
            h.fake.script(fa.text("one"))
            assert (await h.agent.run("first")).ok
            outcome = await h.agent.run("second")
            assert (outcome.kind, outcome.text) == (OutcomeKind.BUDGET_EXHAUSTED, "")
            assert len(h.fake.requests) == 1 and meter.asked == 2
            assert meter.charges[0].cache_write > 0

    arun(body())


def test_the_meter_chooses_each_calls_cache_lifetimes(tmp_path: Path) -> None:
    """The shared prefix and the conversation are asked for with the meter's lifetimes; 1h writes are billed apart."""

    async def body() -> None:
        meter = FakeMeter(lifetime="1h")
        async with harness(tmp_path, tools=[echo_tool()], meter=meter) as h:
            h.fake.script(fa.text("one"))
            await h.agent.run("first")
            request = h.fake.requests[0]
            assert request["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
            assert request["tools"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
            assert request["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
            usage = meter.charges[0]
            assert usage.cache_write_1h == usage.cache_write > 0
            entry = next(e for e in h.session.entries if e["type"] == "message" and "usage" in e)
            assert entry["usage"]["cache_write_1h"] == usage.cache_write_1h
            assert entry["charged_to"] == ["user:42"]  # a rebuild of the day's totals reads who paid

    arun(body())
