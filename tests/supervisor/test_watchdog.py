"""The stall watchdog and heartbeat liveness (pure: explicit boottime and monotonic)."""

from __future__ import annotations

from clankie.protocol import Heartbeat, RunReport
from supervisor.watchdog import Abort, KillService, Liveness, StallWatchdog


def beat(age: float, run_id: str = "r1") -> Heartbeat:
    return Heartbeat(runs=(RunReport(lane="L", run_id=run_id, last_event_age_s=age),))


def test_a_run_silent_for_the_window_is_aborted_once() -> None:
    """A run with no event for stall_seconds gets one abort_run(stalled), not one per tick."""
    wd = StallWatchdog(stall_seconds=300, grace_seconds=15)
    wd.observe(beat(290), boot_now=1000)
    assert wd.tick(1005) == []
    assert wd.tick(1010) == [Abort("L", "r1", 300.0)]
    assert wd.tick(1011) == []
    wd.observe(beat(302), boot_now=1012)  # still reported live: no second abort
    assert wd.tick(1013) == []


def test_a_suspend_between_ticks_fires_on_the_next_tick_once() -> None:
    """An hour of suspend counts in full (CLOCK_BOOTTIME) and the abort comes on the very next tick."""
    wd = StallWatchdog(stall_seconds=300, grace_seconds=15)
    wd.observe(beat(1), boot_now=1000)
    assert wd.tick(1005) == []
    verdicts = wd.tick(1005 + 3600)
    assert len(verdicts) == 1 and isinstance(verdicts[0], Abort) and verdicts[0].age_s >= 3600
    wd.confirmed("r1", True)
    assert wd.tick(1005 + 3605) == []


def test_an_unconfirmed_abort_kills_the_service_after_the_grace() -> None:
    """No AbortReply(aborted) within the grace period means: kill the service and restart it cold."""
    wd = StallWatchdog(stall_seconds=10, grace_seconds=5)
    wd.observe(beat(10), boot_now=0)
    assert isinstance(wd.tick(0)[0], Abort)
    assert wd.tick(4) == []
    verdict = wd.tick(6)
    assert len(verdict) == 1 and isinstance(verdict[0], KillService)


def test_a_run_that_ends_clears_the_pending_abort() -> None:
    """When the heartbeat stops listing the run, the abort is confirmed in effect."""
    wd = StallWatchdog(stall_seconds=10, grace_seconds=5)
    wd.observe(beat(11), boot_now=0)
    wd.tick(0)
    wd.observe(Heartbeat(), boot_now=1)
    assert wd.tick(100) == []


def test_working_runs_are_never_capped() -> None:
    """A run that keeps producing events is left alone however long it lasts."""
    wd = StallWatchdog(stall_seconds=300, grace_seconds=15)
    for t in range(0, 100_000, 5):
        wd.observe(beat(1), boot_now=t)
        assert wd.tick(t + 5) == []


def test_liveness_expires_without_heartbeats_on_the_monotonic_clock() -> None:
    """A child that stops beating for longer than the timeout is declared wedged."""
    live = Liveness(timeout=2.0)
    assert not live.expired(100.0)  # not armed: not watched
    live.arm(0.0)
    assert not live.expired(1.9)
    assert live.expired(2.1)  # never beat at all
    live.beat(2.0)
    assert not live.expired(3.9) and live.expired(4.1)
    live.disarm()
    assert not live.expired(1e9)


def test_a_cold_process_has_its_start_time_for_its_first_beat_and_a_warm_one_does_not() -> None:
    """Cold imports come before a first beat: a process just spawned is given ``first`` seconds for it, then the
    usual ``timeout`` between beats; a warm spare taking the child's place (it ran already) gets ``timeout`` only."""
    live = Liveness(timeout=2.0, first=60.0)
    live.arm(0.0)
    assert not live.expired(59.9) and live.expired(60.1)  # a process that never beats is still wedged
    live.beat(10.0)
    assert not live.expired(11.9) and live.expired(12.1)
    live.arm(100.0, cold=False)
    assert not live.expired(101.9) and live.expired(102.1)
    assert Liveness(timeout=30.0, first=10.0).first == 30.0  # never less than a beat may be late
