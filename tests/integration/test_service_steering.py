"""A burst in one room gets one answer: ownership, steering and absorbed turns over real sockets (§9 #1, 5, 6, 7)."""

from __future__ import annotations

import asyncio

from clankie import jsonl
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from tests.polling import until
from tests.service.captain.harness import FakeBridge, msg, run, service, user_texts


def test_single_message_settles_with_the_reply(env: dict[str, str]) -> None:
    """An idle room's message starts a run, and the turn settles with his words and a turn id."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            fake.script(fa.text("the bracket reset twice"))
            bridge = FakeBridge()
            await bridge.connect(app)
            result = await bridge.submit(msg("m1", "clankie why did that happen"))
            assert result.outcome == "settled"
            assert result.text == "the bracket reset twice"
            assert result.turn_id == "turn-1-m1"
            assert len(fake.requests) == 1

    run(body())


def test_burst_of_three_gets_one_answer_and_two_absorbed(env: dict[str, str]) -> None:
    """m2 and m3 arrive while m1's run streams: one run, m1 settled with one reply, m2/m3 absorbed."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            gate = asyncio.Event()
            fake.script(
                fa.text("hm, first thoughts", stall_after=3, stall_until=gate),
                fa.text("ok — all three of you: it was the lobby timer"),
            )
            bridge = FakeBridge()
            await bridge.connect(app)
            t1 = bridge.start(msg("m1", "clankie why did that happen"))
            await fake.wait_for_requests(1)
            t2 = bridge.start(msg("m2", "it's very rude"))
            t3 = bridge.start(msg("m3", "like actually"))
            await until(lambda: len(app.captain.lanes["discord:clankie:discord:1:2"].machine.steerers) == 2)
            gate.set()
            r1, r2, r3 = await asyncio.gather(t1, t2, t3)
            assert r1.outcome == "settled" and r1.text == "ok — all three of you: it was the lobby timer"
            assert (r2.outcome, r2.turn_id) == ("absorbed", "turn-2-m2")
            assert (r3.outcome, r3.turn_id) == ("absorbed", "turn-3-m3")
            # two model calls of ONE run; the steered messages arrive together in one user turn
            assert len(fake.requests) == 2
            last_user = fake.requests[1]["messages"][-1]
            texts = [b["text"] for b in last_user["content"] if b["type"] == "text"]
            assert any("it's very rude" in t for t in texts) and any("like actually" in t for t in texts)
            log = jsonl.read_lines(app.captain.paths.lane_log(msg("m1", "").room))
            assert [e["kind"] for e in log] == ["heard", "heard", "heard", "said"]
            events = app.turns.evidence
            assert events.of("m1") == ["accepted", "settled"]
            assert events.of("m2") == ["accepted", "absorbed"]
            assert events.of("m3") == ["accepted", "absorbed"]

    run(body())


def test_steered_turn_waits_for_the_merged_run(env: dict[str, str]) -> None:
    """A steered turn does not answer until the run it joined has settled (§9 #5)."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            gate = asyncio.Event()
            fake.script(fa.text("thinking", stall_after=3, stall_until=gate), fa.text("answer to both"))
            bridge = FakeBridge()
            await bridge.connect(app)
            t1 = bridge.start(msg("m1", "first"))
            await fake.wait_for_requests(1)
            t2 = bridge.start(msg("m2", "second"))
            await until(lambda: app.captain.lanes["discord:clankie:discord:1:2"].machine.steerers != [])
            await asyncio.sleep(0)
            assert not t2.done() and not t1.done()
            gate.set()
            assert (await t1).outcome == "settled"
            assert (await t2).outcome == "absorbed"

    run(body())


def test_message_before_the_run_streams_is_steered_not_a_second_reply(env: dict[str, str]) -> None:
    """A message landing while the cold lane is still fetching history joins the same run (§9 #6, amended)."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            fake.script(fa.text("one answer for both"))
            bridge = FakeBridge()
            bridge.history_gate = asyncio.Event()
            await bridge.connect(app)
            t1 = bridge.start(msg("m1", "first"))
            await until(lambda: len(bridge.history_calls) == 1)
            t2 = bridge.start(msg("m2", "second, quickly"))
            await until(lambda: len(app.captain.lanes["discord:clankie:discord:1:2"].machine.held) == 1)
            bridge.history_gate.set()
            r1, r2 = await asyncio.gather(t1, t2)
            assert (r1.outcome, r1.text) == ("settled", "one answer for both")
            assert r2.outcome == "absorbed"
            assert len(fake.requests) == 1
            texts = user_texts(fake.requests[0])
            assert any("first" in t for t in texts) and any("second, quickly" in t for t in texts)

    run(body())


def test_steered_into_a_failing_run_fails_with_the_runs_code(env: dict[str, str]) -> None:
    """When the merged run fails, the owner and every steered turn fail with the run's code (§9 #7)."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            gate = asyncio.Event()
            fake.script(
                fa.text("partial", stall_after=3, stall_until=gate, error_after=4, error_type="invalid_request_error", error_message="bad"),
            )
            bridge = FakeBridge()
            await bridge.connect(app)
            t1 = bridge.start(msg("m1", "first"))
            await fake.wait_for_requests(1)
            t2 = bridge.start(msg("m2", "second"))
            await until(lambda: app.captain.lanes["discord:clankie:discord:1:2"].machine.steerers != [])
            gate.set()
            r1, r2 = await asyncio.gather(t1, t2)
            assert (r1.outcome, r1.code, r1.turn_id) == ("failed", "captain_model_failed", "turn-1-m1")
            assert (r2.outcome, r2.code, r2.turn_id) == ("failed", "captain_model_failed", "turn-2-m2")
            assert app.turns.evidence.of("m2") == ["accepted", "failed"]

    run(body())


def test_rooms_do_not_serialize_each_other(env: dict[str, str]) -> None:
    """A slow run in one room does not hold up a message in another room."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            gate = asyncio.Event()
            fake.script(fa.text("slow", stall_after=3, stall_until=gate), fa.text("fast"))
            bridge = FakeBridge()
            await bridge.connect(app)
            slow = bridge.start(msg("m1", "slow one", channel="2"))
            await fake.wait_for_requests(1)
            fast = await bridge.submit(msg("m2", "fast one", channel="3"))
            assert (fast.outcome, fast.text) == ("settled", "fast")
            assert not slow.done()
            gate.set()
            assert (await slow).text == "slow"

    run(body())
