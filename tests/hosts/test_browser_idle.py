"""Lazy Chromium: started by the first request, closed after an idle period, started again on demand.

The pure idle decision and lifecycle moves are checked with explicit times;
the rest runs real headless Chromium, in process under a fake clock (to
place a request exactly while the browser closes) and as a real host
process with a one-second idle setting (polling its heartbeat, no timing
assertion).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import psutil
import pytest

from clankie import settings as settings_mod
from clankie.errors import LocalProtocolError
from clankie.protocol import Artifact, ScreenshotRequest
from clankie.testing.clock import FakeClock
from hosts.browser.host import BrowserHost
from hosts.browser.lifecycle import Lifecycle, idle_due
from tests.hosts.hostproc import HostProcess, shoot
from tests.hosts.pages import Site
from tests.polling import until, until_probe
from tests.processes import children_where


def _chromium_children(pid: int) -> list[int]:
    live = children_where(psutil.Process(pid), lambda p: "chromium" in p.name() and p.status() != psutil.STATUS_ZOMBIE,
                          recursive=True)
    return [p.pid for p in live]


def _state(host: BrowserHost) -> str:
    return host.life.state  # read afresh (the host's tasks move it between awaits)


def test_idle_due_needs_the_full_period_and_no_request_in_flight() -> None:
    """The browser is due to close only once idle_seconds have passed since the last request finished, and never with one in flight."""
    assert not idle_due(now=1299.9, last_done=1000.0, idle_seconds=300.0, busy=0)
    assert idle_due(now=1300.0, last_done=1000.0, idle_seconds=300.0, busy=0)
    assert not idle_due(now=5000.0, last_done=1000.0, idle_seconds=300.0, busy=1)


def test_an_idle_close_is_not_a_crash_and_the_next_launch_counts() -> None:
    """up -> stopping -> down counts an idle stop, not a crash; a disconnect while stopping stays there; no launch mid-stop."""
    life = Lifecycle()
    life.apply("launch", 1.0)
    life.apply("launched", 2.0)
    assert life.apply("idle", 10.0) == "stopping"
    assert life.report(11.0)["up_for_s"] == 9.0
    assert life.apply("disconnected", 11.0) == "stopping"
    with pytest.raises(LocalProtocolError):
        life.apply("launch", 11.0)
    assert life.apply("stopped", 12.0) == "down"
    assert (life.crashes, life.idle_stops, life.launches) == (0, 1, 1)
    life.apply("launch", 13.0)
    life.apply("launched", 14.0)
    assert life.restarts == 1



@pytest.mark.slow
@pytest.mark.timeout(150)
def test_concurrent_first_requests_start_once_and_a_request_during_the_close_waits(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two first requests launch Chromium once; idle, it closes; a request arriving mid-close waits, relaunches, succeeds."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the host points TMPDIR at its private dir; put ours back afterwards
    # in the test's own process (root here): Chromium cannot sandbox as root, and this process must not drop its uid
    settings = settings_mod.load({**env, "CLANKIE_BROWSER_ALLOW_PRIVATE": "true", "CLANKIE_BROWSER_IDLE_SECONDS": "300",
                                  "CLANKIE_BROWSER_SANDBOX": "off"})
    clock = FakeClock()

    async def main() -> None:
        host = BrowserHost(settings, clock)
        await host.start()
        try:
            assert host.chromium == "down" and host.life.launches == 0
            async with Site() as site:
                req = ScreenshotRequest(url=site.origin + "/")
                first = await asyncio.gather(host.screenshot(req), host.screenshot(req))
                assert all(isinstance(a, Artifact) for a in first)
                assert host.life.launches == 1 and host.chromium == "up"
                clock.advance(299)
                await asyncio.sleep(0.05)  # sleep: Chromium must not close in this window (1 s short of idle)
                assert _state(host) == "up"
                clock.advance(10)
                await until(lambda: _state(host) != "up", what="the idle close to begin", step=0)
                assert _state(host) == "stopping"
                again = await host.screenshot(req)  # waits for the close, then starts Chromium again
                assert isinstance(again, Artifact) and again.size > 0
                assert _state(host) == "up" and host.life.launches == 2
                assert host.life.idle_stops == 1 and host.life.crashes == 0
        finally:
            await host.close()

    asyncio.run(main())


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_chromium_stops_when_idle_and_starts_again_on_demand(env: dict[str, str], tmp_path: Path) -> None:
    """A host with a 1 s idle setting starts without Chromium, launches it for a screenshot, closes it idle, and shoots again."""
    host_env = {
        **env,
        "CLANKIE_BROWSER_ALLOW_PRIVATE": "true",
        "CLANKIE_BROWSER_IDLE_SECONDS": "1",
        "CLANKIE_HEARTBEAT_SECONDS": "0.2",
    }

    async def reported(host: HostProcess, chromium: str) -> dict[str, object]:
        async def beat_saying() -> dict[str, object] | None:
            beat = await host.next_heartbeat()
            if beat.report["chromium"] != chromium:
                return None
            assert beat.detail.startswith(f"chromium {chromium}")
            return beat.report

        return await until_probe(beat_saying, 60, f"a heartbeat saying chromium {chromium}", step=0)

    async def main() -> None:
        async with Site() as site, HostProcess("browser", host_env, tmp_path / "host.log") as host:
            assert host.proc is not None
            report = await reported(host, "down")
            assert report["launches"] == 0 and _chromium_children(host.proc.pid) == []
            assert (await shoot(host, site.origin + "/")).size > 0
            report = await reported(host, "down")
            assert report["launches"] == 1 and report["idle_stops"] == 1 and report["crashes"] == 0
            assert _chromium_children(host.proc.pid) == []
            assert (await shoot(host, site.origin + "/")).size > 0
            beat = await host.next_heartbeat()
            assert beat.report["launches"] == 2 and beat.report["idle_stops"] in (1, 2)

    asyncio.run(main())
