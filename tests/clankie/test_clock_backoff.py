"""The fake clock and the pure backoff."""

from __future__ import annotations

import asyncio

from clankie.backoff import Backoff
from clankie.clock import SystemClock
from clankie.testing.clock import FakeClock


def test_fake_sleepers_wake_only_when_time_is_advanced() -> None:
    """A sleep on the fake clock finishes when the test moves time past it."""

    async def main() -> list[str]:
        clock = FakeClock()
        woke: list[str] = []

        async def sleeper(name: str, s: float) -> None:
            await clock.sleep(s)
            woke.append(name)

        tasks = [asyncio.create_task(sleeper("a", 5)), asyncio.create_task(sleeper("b", 10))]
        await asyncio.sleep(0)
        clock.advance(6)
        await asyncio.sleep(0)
        assert woke == ["a"]
        clock.advance(4)
        await asyncio.gather(*tasks)
        return woke

    assert asyncio.run(main()) == ["a", "b"]


def test_suspend_moves_boottime_but_not_monotonic() -> None:
    """A simulated host suspend counts for CLOCK_BOOTTIME ages only."""
    clock = FakeClock()
    mono, boot = clock.monotonic(), clock.boottime()
    clock.suspend(3600)
    assert clock.monotonic() == mono
    assert clock.boottime() == boot + 3600


def test_system_boottime_never_runs_behind_monotonic() -> None:
    """CLOCK_BOOTTIME counts at least as much as CLOCK_MONOTONIC."""
    clock = SystemClock()
    assert clock.boottime() >= clock.monotonic() - 1e-3


def test_backoff_grows_to_the_cap_with_full_jitter() -> None:
    """The ceiling doubles per attempt up to the cap; the delay is a fraction of it."""
    b = Backoff(base=1, cap=8, reset_after=100, rand=lambda: 1.0)
    assert [b.delay(now=float(i)) for i in range(6)] == [1, 2, 4, 8, 8, 8]
    half = Backoff(base=1, cap=8, rand=lambda: 0.5)
    assert half.delay(0) == 0.5


def test_backoff_resets_after_a_quiet_period() -> None:
    """A failure long after the last one starts the sequence over."""
    b = Backoff(base=1, cap=60, reset_after=30, rand=lambda: 1.0)
    for t in range(5):
        b.delay(float(t))
    assert b.delay(5.0) == 32
    assert b.delay(100.0) == 1


def test_one_retry_schedule_serves_both_callers() -> None:
    """The bridge's default (jittered, retry-after cut to 120 s) and the agent's (2, 4, 8 s; gives up beyond 60 s)."""
    from clankie.backoff import RetryPolicy
    from service.agent.retry import AGENT_RETRY

    bridge = RetryPolicy()
    assert bridge.max_retries == 5 and [bridge.ceiling(n) for n in range(1, 7)] == [1, 2, 4, 8, 16, 30]
    assert bridge.delay(3, None, rand=lambda: 0.5) == 2.0
    assert bridge.delay(1, 500.0, rand=lambda: 0.0) == 120.0  # cut, not given up
    assert bridge.delay(6, None) is None
    assert [AGENT_RETRY.delay(n, None) for n in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, None]
    assert AGENT_RETRY.delay(1, 61.0) is None and AGENT_RETRY.max_retries == 3
