"""How turns end: silence, missing replies, provider failures, and idempotent re-submission (§9 #18, 19, 33–35, 44)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from clankie import jsonl
from clankie.errors import RemoteError
from clankie.testing import fake_anthropic as fa
from clankie.testing.clock import FakeClock
from clankie.testing.fake_anthropic import FakeAnthropic
from service.captain.lanes import keys
from tests.disk import writes_refused_past
from tests.polling import until
from tests.service.captain.harness import FakeBridge, msg, run, service


def _tree_text(state_dir: Path) -> str:
    room = keys.CaptainPaths.under(state_dir).room("discord:clankie:discord:1:2")
    return "".join(p.read_text() for p in room.glob("*.jsonl"))


@pytest.mark.parametrize(
    ("reply", "outcome", "text"),
    [
        ("  [[stay-silent]]\n", "silent", ""),
        ("[[stay-silent]] lol", "settled", "[[stay-silent]] lol"),
    ],
)
def test_silence_is_the_whole_trimmed_reply(env: dict[str, str], reply: str, outcome: str, text: str) -> None:
    """Only a reply that is exactly the sentinel stays silent; quoting it posts verbatim (§9 #18)."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            fake.script(fa.text(reply))
            bridge = FakeBridge()
            await bridge.connect(app)
            result = await bridge.submit(msg("m1", "say the token"))
            assert (result.outcome, result.text) == (outcome, text)
            kinds = [e["kind"] for e in jsonl.read_lines(app.captain.paths.lane_log(msg("m1", "").room))]
            assert kinds == (["heard"] if outcome == "silent" else ["heard", "said"])
            assert app.turns.evidence.of("m1") == ["accepted", "declined" if outcome == "silent" else "settled"]

    run(body())


def test_empty_reply_is_response_missing(env: dict[str, str]) -> None:
    """A run that finishes with no text fails captain_response_missing, not silence (§9 #19, #35)."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            fake.script(fa.text("   "))
            bridge = FakeBridge()
            await bridge.connect(app)
            result = await bridge.submit(msg("m1", "hello"))
            assert (result.outcome, result.code, result.turn_id) == ("failed", "captain_response_missing", "turn-1-m1")

    run(body())


@pytest.mark.parametrize("failure", [fa.spend_limit(), fa.legacy_usage_limit()])
def test_usage_limit_fails_with_its_own_code_and_keeps_the_text_in_the_tree(
    env: dict[str, str], state_dir: Path, failure: fa.Failure
) -> None:
    """A usage/spend limit fails captain_usage_limit_reached; the provider text stays only in the tree (§9 #33)."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            fake.script(failure)
            bridge = FakeBridge()
            await bridge.connect(app)
            result = await bridge.submit(msg("m1", "hello"))
            assert (result.outcome, result.code) == ("failed", "captain_usage_limit_reached")
            assert len(fake.requests) == 1  # never retried
            evidence = app.turns.evidence.path.read_text()
            assert failure.message not in evidence and "hello" not in evidence
            assert failure.message[:30] in _tree_text(state_dir)

    run(body())


def test_model_failure_after_retries_posts_nothing_even_with_partial_text(env: dict[str, str]) -> None:
    """A 500 on every retry after some text streamed fails captain_model_failed and posts no partial text (§9 #34)."""

    async def body() -> None:
        clock = FakeClock(autojump=True)
        async with FakeAnthropic() as fake, service(env, fake, clock=clock) as app:
            fake.script(
                fa.text("partial answ", error_after=3, error_type="api_error", error_message="500 internal error"),
                fa.server_error(),
                fa.server_error(),
                fa.server_error(),
            )
            bridge = FakeBridge()
            await bridge.connect(app)
            result = await bridge.submit(msg("m1", "hello"))
            assert (result.outcome, result.code, result.text) == ("failed", "captain_model_failed", "")
            assert len(fake.requests) == 4
            assert jsonl.read_lines(app.captain.paths.lane_log(msg("m1", "").room))[-1]["kind"] == "heard"

    run(body())


def test_same_delivery_twice_is_one_turn_and_one_result(env: dict[str, str]) -> None:
    """The same delivery submitted twice concurrently and once more later gets one turn and the same result (§9 #44)."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            gate = asyncio.Event()
            fake.script(fa.text("only once", stall_after=3, stall_until=gate))
            bridge = FakeBridge()
            await bridge.connect(app)
            a = bridge.start(msg("m1", "hello"))
            await fake.wait_for_requests(1)
            b = bridge.start(msg("m1", "hello"))
            await until(lambda: app.turns.attached("m1") == 1)  # the second submission joined the running turn
            gate.set()
            ra, rb = await asyncio.gather(a, b)
            assert ra == rb and ra.outcome == "settled"
            assert await bridge.submit(msg("m1", "hello")) == ra
            assert len(fake.requests) == 1
            assert app.turns.evidence.of("m1") == ["accepted", "settled"]

    run(body())


def test_same_delivery_with_a_different_body_is_a_conflict(env: dict[str, str]) -> None:
    """Re-using a delivery id for different content is refused with delivery_conflict and loses nothing."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            first = await bridge.submit(msg("m1", "hello"))
            with pytest.raises(RemoteError) as err:
                await bridge.submit(msg("m1", "something else"))
            assert err.value.code == "delivery_conflict"
            assert await bridge.submit(msg("m1", "hello")) == first

    run(body())


def test_reconnected_bridge_attaches_to_the_running_turn(env: dict[str, str]) -> None:
    """A bridge that reconnects mid-turn and re-submits gets the same turn's result on its new connection."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            gate = asyncio.Event()
            fake.script(fa.text("still here", stall_after=2, stall_until=gate))  # before any text
            old = FakeBridge()
            await old.connect(app)
            lost = old.start(msg("m1", "hello"))
            await fake.wait_for_requests(1)
            assert old.conn is not None
            await old.conn.aclose()
            with pytest.raises(Exception):  # noqa: B017 (whichever error the closed link raises: the point is that it does not hang)
                await lost
            new = FakeBridge()
            await new.connect(app)
            again = new.start(msg("m1", "hello"))
            await until(lambda: app.turns.attached("m1") == 1)  # re-submission attached to the running turn
            gate.set()
            result = await again
            assert (result.outcome, result.text) == ("settled", "still here")
            assert len(new.typing) == 1 and old.typing == []  # typing goes to the connection holding the delivery
            assert len(fake.requests) == 1

    run(body())


def test_retained_result_survives_a_restart_and_conflicts_still_refused(env: dict[str, str]) -> None:
    """After a service restart a re-submitted delivery gets the retained result from disk, not a new turn."""

    async def body() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.text("first life"))
            async with service(env, fake) as app:
                bridge = FakeBridge()
                await bridge.connect(app)
                first = await bridge.submit(msg("m1", "hello"))
            async with service(env, fake) as app:
                bridge = FakeBridge()
                await bridge.connect(app)
                assert await bridge.submit(msg("m1", "hello")) == first
                with pytest.raises(RemoteError, match="different body"):
                    await bridge.submit(msg("m1", "changed"))
            assert len(fake.requests) == 1

    run(body())


def test_retained_results_expire_after_seven_hours(env: dict[str, str]) -> None:
    """Delivery records older than seven hours are pruned and no longer answer."""

    async def body() -> None:
        clock = FakeClock()
        async with FakeAnthropic() as fake, service(env, fake, clock=clock) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            await bridge.submit(msg("m1", "hello"))
            assert app.store.load("m1") is not None
            clock.advance(7 * 3600 + 1)
            assert app.store.load("m1") is None
            assert app.store.prune() == 1

    run(body())


def test_a_delivery_the_disk_cannot_record_is_refused_and_never_run(env: dict[str, str]) -> None:
    """An accept the disk refuses fails the submission service_disk_full: nothing runs, no torn line; later it runs."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            fake.script(fa.text("first answer"), fa.text("second answer"))
            bridge = FakeBridge()
            await bridge.connect(app)
            await bridge.submit(msg("m1", "hello"))
            segment = app.store.log.segments()[-1]
            size = segment.stat().st_size
            with writes_refused_past(size + 10), pytest.raises(RemoteError) as refused:
                await bridge.submit(msg("m2", "are you there"))
            assert refused.value.code == "service_disk_full"
            assert segment.stat().st_size == size and len(fake.requests) == 1
            assert app.store.load("m2") is None and app.turns.evidence.of("m2") == []
            result = await bridge.submit(msg("m2", "are you there"))  # room again: it runs
            assert (result.outcome, result.text) == ("settled", "second answer")

    run(body())
