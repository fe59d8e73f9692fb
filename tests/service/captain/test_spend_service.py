"""Spend governed in the service: budgets before every model call, the budget notice, durable totals, cache
lifetime by pace and cache health. The service runs in-process on its real socket, with the real SDK against
the fake Anthropic, which bills as the API does on the same fake clock."""

from __future__ import annotations

import asyncio
import logging
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from clankie.metrics import METER
from clankie.protocol import BudgetRequest, LanesRequest
from clankie.rotation import read_all
from clankie.testing import fake_anthropic as fa
from clankie.testing.clock import FakeClock
from clankie.testing.fake_anthropic import FakeAnthropic
from service.captain.lanes import prompt
from service.captain.spend.spending import NOTICE
from tests.polling import until
from tests.service.captain.harness import FakeBridge, msg, run, service


def _ttl(body: dict[str, Any]) -> tuple[str, str]:
    """(shared prefix, conversation) lifetimes a request asked for."""
    return body["system"][0]["cache_control"]["ttl"], body["cache_control"]["ttl"]


def test_a_spent_tree_budget_makes_no_request_and_says_so_once_an_hour(env: dict[str, str]) -> None:
    """With a 1-token day budget the first turn runs (nothing was spent); every later turn fails
    captain_budget_exhausted with no model request and no history call; an addressed turn gets the templated
    line once per room per hour, an unprompted one never."""

    async def body() -> None:
        clock = FakeClock()
        async with FakeAnthropic(clock=clock) as fake, service(env, fake, clock=clock, budget_day_tokens=1) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            assert (await bridge.submit(msg("m1", "hello"))).outcome == "settled"
            for mid in ("m2", "m3"):
                result = await bridge.submit(msg(mid, "again"))
                assert (result.outcome, result.code) == ("failed", "captain_budget_exhausted")
            assert len(fake.requests) == 1 and len(bridge.history_calls) == 1
            assert [u.text for u in bridge.updates] == [NOTICE]  # m2 said it; m3 within the hour did not
            assert app.turns.evidence.of("m2") == ["accepted", "failed"]
            clock.advance(3601)
            assert (await bridge.submit(msg("m4", "x", unprompted=True))).code == "captain_budget_exhausted"
            assert len(bridge.updates) == 1
            assert (await bridge.submit(msg("m5", "hello?"))).code == "captain_budget_exhausted"
            assert [u.delivery_id for u in bridge.updates] == ["m2", "m5"]
            assert len(fake.requests) == 1
            beat = app.heartbeat()
            assert "!! budget 80% spent: tree; budget: spent" in beat.detail and "left 0/1 tok" in beat.detail
            assert beat.report["budget_tokens_left"] < 0 and beat.report["budget_warned"] == ["tree"]

    run(body())


def test_a_turn_whose_budget_notice_is_cut_by_shutdown_still_ends_budget_exhausted(env: dict[str, str]) -> None:
    """The outcome of a turn refused by a spent budget is decided before its notice is posted: a shutdown (or an
    operator abort) that cancels the run while the notice is in flight ends the turn ``captain_budget_exhausted``,
    once, instead of leaving it unanswered."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, budget_day_tokens=1) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            assert (await bridge.submit(msg("m1", "hello"))).outcome == "settled"
            bridge.update_gate = asyncio.Event()  # the notice hangs on the bridge
            refused = bridge.start(msg("m2", "again"))
            await bridge.update_asked.wait()
            await asyncio.wait_for(app.captain.aclose(), 30)  # feeds ShutDown: the lane cancels its owner task
            result = await asyncio.wait_for(refused, 30)
            assert (result.outcome, result.code) == ("failed", "captain_budget_exhausted")
            assert app.turns.evidence.of("m2") == ["accepted", "failed"]
            bridge.update_gate.set()

    run(body())


def _always_a_tool(body: dict[str, Any]) -> fa.Scenario:
    n = sum(1 for m in body["messages"] if m["role"] == "assistant") + 1
    words = [{"type": "text", "text": f"page {n} done"}] if n > 1 else []
    return fa.Reply(blocks=[*words, {"type": "tool_use", "id": f"toolu_{n}", "name": "send_text_update",
                                     "input": {"text": f"working on page {n}"}}], stop_reason="tool_use")


def _counted(name: str, *labels: str) -> float:
    """A counter's value in this process's meter (0 for a series never counted)."""
    report = METER.report()
    assert report is not None
    return sum(s.value for s in report.counters.get(name, ()) if s.labels == labels)


@pytest.mark.parametrize(("cap", "outcome"), [(3, "settled"), (0, "failed")])
def test_a_model_that_always_calls_a_tool_stops_at_the_cap_with_the_words_so_far(
    env: dict[str, str], cap: int, outcome: str
) -> None:
    """Past CLANKIE_RUN_MAX_TOOL_CALLS the run ends: the room gets the words written so far as the reply, or, with
    none, the turn fails captain_run_budget_exceeded. Either way the result and the delivery's evidence carry
    captain_run_budget_exceeded (a reply cut short says so), and clankie_run_caps_total counts the run."""
    words = "yes" if outcome == "settled" else "no"

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, run_max_tool_calls=cap, discord_guild_ids=("1",),
                                                    metrics_listen="127.0.0.1:9464") as app:  # the meter on
            fake.respond_with(_always_a_tool)
            bridge = FakeBridge()
            await bridge.connect(app)
            before = _counted("clankie_run_caps_total", "tool_calls", words)
            turns_before = _counted("clankie_turns_total", outcome, "captain_run_budget_exceeded")
            result = await bridge.submit(msg("m1", "screenshot these 200 URLs"))
            assert len(bridge.updates) == cap and len(fake.requests) == cap + 1
            if outcome == "settled":
                assert (result.outcome, result.text) == ("settled", "page 2 done\n\npage 3 done\n\npage 4 done")
            assert (result.outcome, result.code) == (outcome, "captain_run_budget_exceeded")
            evidence = [e for e in read_all(app.turns.evidence.path) if e["delivery_id"] == "m1"]
            assert [(e["event"], e.get("code")) for e in evidence] == [
                ("accepted", None), (outcome, "captain_run_budget_exceeded")]
            assert _counted("clankie_run_caps_total", "tool_calls", words) == before + 1
            assert _counted("clankie_turns_total", outcome, "captain_run_budget_exceeded") == turns_before + 1
            again = await bridge.submit(msg("m1", "screenshot these 200 URLs"))  # the retained result says it too
            assert (again.outcome, again.code) == (outcome, "captain_run_budget_exceeded")

    run(body())


def test_a_message_steered_into_a_capped_run_is_absorbed_with_the_cap_code(env: dict[str, str]) -> None:
    """A message steered into a run that then stops at its cap is absorbed into the cut-short reply, and says so."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, run_max_tool_calls=2, discord_guild_ids=("1",)) as app:
            gate = asyncio.Event()

            def held_first(body: dict[str, Any]) -> fa.Scenario:
                reply = _always_a_tool(body)
                assert isinstance(reply, fa.Reply)
                return replace(reply, stall_after=3, stall_until=gate) if len(fake.requests) == 1 else reply

            fake.respond_with(held_first)
            bridge = FakeBridge()
            await bridge.connect(app)
            first = bridge.start(msg("m1", "screenshot these 200 URLs"))
            await fake.wait_for_requests(1)
            steered = bridge.start(msg("m2", "and these too"))
            await until(lambda: len(app.captain.lanes["discord:clankie:discord:1:2"].machine.steerers) == 1)
            gate.set()
            result, second = await asyncio.gather(first, steered)
            assert (result.outcome, result.code) == ("settled", "captain_run_budget_exceeded")
            assert (second.outcome, second.code) == ("absorbed", "captain_run_budget_exceeded")
            assert app.turns.evidence.of("m2") == ["accepted", "absorbed"]

    run(body())


def test_a_room_budget_stops_one_room_and_not_another(env: dict[str, str]) -> None:
    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, budget_room_day_tokens=1) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            assert (await bridge.submit(msg("a1", "hi", channel="2"))).outcome == "settled"
            assert (await bridge.submit(msg("a2", "hi", channel="2"))).code == "captain_budget_exhausted"
            assert (await bridge.submit(msg("b1", "hi", channel="3"))).outcome == "settled"
            assert len(fake.requests) == 2

    run(body())


def test_a_user_budget_stops_one_person_in_every_room(env: dict[str, str]) -> None:
    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, budget_user_day_usd=0.000001) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            assert (await bridge.submit(msg("p1", "hi", channel="2", author="42"))).outcome == "settled"
            for mid, channel in (("p2", "2"), ("p3", "3")):
                result = await bridge.submit(msg(mid, "hi", channel=channel, author="42"))
                assert result.code == "captain_budget_exhausted"
            assert (await bridge.submit(msg("q1", "hi", channel="3", author="43"))).outcome == "settled"
            assert len(fake.requests) == 2

    run(body())


def test_the_days_totals_survive_a_restart_and_a_lost_ledger(env: dict[str, str], state_dir: Path) -> None:
    """A restarted service reads today's spend back from its ledger; with the ledger gone, from the session trees
    (each assistant entry says who it was charged to), so the budget still holds."""

    async def body() -> None:
        async with FakeAnthropic() as fake:
            async with service(env, fake, budget_room_day_tokens=1) as app:
                bridge = FakeBridge()
                await bridge.connect(app)
                assert (await bridge.submit(msg("m1", "hi"))).outcome == "settled"
                spent = app.spending.budgets.used("room:1/2")
            for lose_ledger in (False, True):
                if lose_ledger:
                    shutil.rmtree(state_dir / "captain" / "spend")
                async with service(env, fake, budget_room_day_tokens=1) as app:
                    assert app.spending.budgets.used("room:1/2") == spent
                    bridge = FakeBridge()
                    await bridge.connect(app)
                    result = await bridge.submit(msg(f"again-{lose_ledger}", "hi"))
                    assert result.code == "captain_budget_exhausted"
            assert len(fake.requests) == 1

    run(body())


def test_the_operator_raises_and_resets_a_budget_live(env: dict[str, str]) -> None:
    """``budget raise`` lets a spent room talk again at once, ``reset`` forgets what it spent; both are evidence."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, budget_room_day_tokens=1) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            await bridge.submit(msg("m1", "hi"))
            assert (await bridge.submit(msg("m2", "hi"))).code == "captain_budget_exhausted"
            reply = await app._budget(BudgetRequest(action="raise", key="room:1/2", tokens=10_000_000))
            assert reply.budgets[0].limit_tokens == 10_000_000 and reply.budgets[0].tokens_left is not None
            assert (await bridge.submit(msg("m3", "hi"))).outcome == "settled"
            reply = await app._budget(BudgetRequest(action="reset", key="room:1/2"))
            assert reply.budgets[0].spent_tokens == 0
            shown = await app._budget(BudgetRequest())
            assert shown.budgets[0].key == "tree"
            audit = app.turns.evidence.path.read_text()
            assert '"event":"budget_raise"' in audit and '"event":"budget_reset"' in audit

    run(body())


def test_a_room_whose_turns_come_eight_minutes_apart_is_sent_the_hour_and_a_burst_five_minutes(
    env: dict[str, str],
) -> None:
    """Room 2 speaks every 8 minutes: after its first gap its conversation is cached for an hour (and its
    prefix too: the API takes the longer lifetime first). Room 3 bursts: 5 minutes."""

    async def body() -> None:
        clock = FakeClock()
        async with FakeAnthropic(clock=clock) as fake, service(env, fake, clock=clock) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            for i in range(3):
                await bridge.submit(msg(f"slow{i}", f"slow {i}", channel="2"))
                clock.advance(480)
            slow = [_ttl(b) for b in fake.requests]
            assert slow[0][1] == "5m" and slow[-1] == ("1h", "1h")
            first_burst = len(fake.requests)
            for i in range(3):
                await bridge.submit(msg(f"fast{i}", f"fast {i}", channel="3"))
                clock.advance(10)
            assert [_ttl(b)[1] for b in fake.requests[first_burst:]] == ["5m", "5m", "5m"]
            rows = {r.key: r for r in (await app._lanes(LanesRequest())).lanes}
            assert rows["discord:clankie:discord:1:2"].cache_lifetime == "1h"
            slow_health = app.spending.health["discord:clankie:discord:1:2"]
            assert slow_health.last_share is not None and slow_health.last_share > 0.7  # 8 min later, read from cache
            slow_row = rows["discord:clankie:discord:1:2"]
            assert slow_row.cache_read_share is not None and 0 < slow_row.cache_read_share < 1  # lanes shows it
            assert "cache read " in app.heartbeat().detail and 0 < app.heartbeat().report["cache_read_share"] < 1
            assert rows["discord:clankie:discord:1:3"].cache_lifetime == "5m"

    run(body())


def test_a_changed_system_prompt_trips_the_cache_health_warning(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A warm lane whose next call reads little from the cache (its system prompt changed under it: here a
    redeploy that reopened the lane with a new prompt) is warned about, naming the lane."""

    async def body() -> None:
        clock = FakeClock()
        async with FakeAnthropic(clock=clock) as fake, service(env, fake, clock=clock, lanes_max_live=1) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            for i in range(3):
                await bridge.submit(msg(f"m{i}", f"turn {i}", channel="2"))
                clock.advance(30)
            assert "cache health" not in caplog.text
            original = prompt.system_prompt
            monkeypatch.setattr(prompt, "system_prompt", lambda *a: original(*a) + f"\nNow: {clock.wall()}")
            await bridge.submit(msg("other", "evicts room 2", channel="3"))  # lanes_max_live=1: room 2 is closed
            clock.advance(30)
            await bridge.submit(msg("m3", "turn 3", channel="2"))  # reopened with the new prompt, still warm
            warnings = [r.getMessage() for r in caplog.records if "cache health" in r.getMessage()]
            assert len(warnings) == 1 and "discord:clankie:discord:1:2" in warnings[0]
            assert app.heartbeat().report["cache_lanes_broken"] == ["discord:clankie:discord:1:2"]
            assert len(fake.requests) == 5

    caplog.set_level(logging.WARNING, logger="service.captain.spend.spending")
    run(body())
