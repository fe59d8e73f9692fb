"""Spend is bounded by default: each room and each person has a day budget out of the box, and a tree without a
tree budget says so at start, in its status line and in a metric (docs/spend.md, "The defaults")."""

from __future__ import annotations

import logging

import pytest

from clankie import settings as settings_mod
from clankie.metrics import METER
from clankie.pricing import price_of
from clankie.protocol import BudgetRequest
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from tests.service.captain.harness import FakeBridge, msg, run, service, service_env


def test_every_room_and_person_has_a_day_budget_out_of_the_box(env: dict[str, str]) -> None:
    """With nothing set, rooms and persons have dollar budgets a day; the tree has none (it says so elsewhere)."""
    s = settings_mod.load(service_env(env, None))
    assert s.budget_user_day_usd == 40.0 and s.budget_room_day_usd == 100.0
    assert s.budget_day_usd == 0 and s.budget_day_tokens == 0


def test_an_honest_heavy_day_stays_under_the_warning_of_the_defaults(env: dict[str, str]) -> None:
    """docs/spend.md's heavy day, priced by the real table on the default model: 200 turns of 3 calls on a
    60,000-token conversation (2,000 new tokens written, 700 out), and the conversation written again once an hour
    for ten hours; it costs $25.20, under 80 % of a person's budget (no warning), and four such people fit a room's."""
    s = settings_mod.load(service_env(env, None))
    price = price_of(s.model_prices, s.model)
    call = price.usd(input=0, output=700, cache_read=60_000, cache_write_5m=2_000, cache_write_1h=0)
    rewrite = price.usd(input=0, output=0, cache_read=0, cache_write_5m=0, cache_write_1h=60_000)
    day = 200 * 3 * call + 10 * rewrite
    assert round(day, 2) == 25.20
    assert day < 0.8 * s.budget_user_day_usd and 4 * day <= s.budget_room_day_usd + 1.0


def test_the_default_person_budget_stops_a_person_who_spent_it(
    env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """No budget configured: one reply billed 3M output tokens ($45 on the default model) spends the person's $40
    and the room's first $45; that person's next turn, in another room, fails ``captain_budget_exhausted`` with no
    model request; someone else is answered. The start log, the status line, the heartbeat and the metric say
    the tree has no budget of its own, until the operator gives it one."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, metrics_listen="127.0.0.1:9464") as app:  # gauges on
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

    with caplog.at_level(logging.WARNING, logger="service.captain.spend.spending"):
        run(body())
    assert any("the tree has no day budget" in r.getMessage() for r in caplog.records)
