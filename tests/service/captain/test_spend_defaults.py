"""Spend is bounded by default: each room and each person has a day budget out of the box, and a tree without a
tree budget says so at start, in its status line and in a metric (docs/spend.md, "The defaults")."""

from __future__ import annotations

import logging

import pytest

from clankie import settings as settings_mod
from clankie.metrics import METER
from clankie.protocol import BudgetRequest
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from tests.service.captain.harness import FakeBridge, msg, run, service, service_env


def test_every_room_and_person_has_a_day_budget_out_of_the_box(env: dict[str, str]) -> None:
    """With nothing set, rooms and persons have dollar budgets a day; the tree has none (it says so elsewhere)."""
    s = settings_mod.load(service_env(env, None))
    assert s.budget_user_day_usd == 40.0 and s.budget_room_day_usd == 100.0
    assert s.budget_day_usd == 0 and s.budget_day_tokens == 0


def test_the_default_person_budget_stops_a_person_who_spent_it(
    env: dict[str, str], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No budget configured: one reply billed 3M output tokens ($45 on the default model) spends the person's $40
    and the room's first $45; that person's next turn, in another room, fails ``captain_budget_exhausted`` with no
    model request; someone else is answered. The start log, the status line, the heartbeat and the metric say
    the tree has no budget of its own, until the operator gives it one."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            fake.script(fa.text("a long one", output_tokens=3_000_000))
            bridge = FakeBridge()
            await bridge.connect(app)
            assert (await bridge.submit(msg("p1", "write me a novel", channel="2", author="42"))).outcome == "settled"
            result = await bridge.submit(msg("p2", "and another", channel="3", author="42"))
            assert (result.outcome, result.code) == ("failed", "captain_budget_exhausted")
            assert (await bridge.submit(msg("q1", "hi", channel="3", author="43"))).outcome == "settled"
            assert len(fake.requests) == 2
            beat = app.heartbeat()
            assert "no tree budget" in beat.detail and "user $40.00 (1 spent)" in beat.detail
            assert beat.report["budget_unbounded"] == ["tree"]
            report = METER.report()
            assert report is not None
            unbounded = {row.labels: row.value for row in report.gauges["clankie_budget_unbounded"]}
            assert unbounded == {("tree",): 1.0, ("room",): 0.0, ("user",): 0.0}
            await app._budget(BudgetRequest(action="raise", key="tree", usd=500.0))  # the operator gives it one
            beat = app.heartbeat()
            assert "no tree budget" not in beat.detail and beat.report["budget_unbounded"] == []
            report = METER.report()
            assert report is not None
            assert {row.labels: row.value for row in report.gauges["clankie_budget_unbounded"]}[("tree",)] == 0.0

    monkeypatch.setattr(METER, "enabled", True)  # the service's gauges, as under CLANKIE_METRICS_LISTEN
    with caplog.at_level(logging.WARNING, logger="service.captain.spending"):
        run(body())
    assert any("the tree has no day budget" in r.getMessage() for r in caplog.records)
