"""The browser host as a real process with real Chromium: screenshots, bad input, crashes."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import signal
import tempfile
from pathlib import Path

import psutil
import pytest
from PIL import Image

from clankie.errors import RemoteError
from clankie.protocol import Artifact, Viewport
from hosts.browser.host import MAX_HEIGHT
from tests.hosts.hostproc import HostProcess, raw_call, shoot
from tests.hosts.pages import GREEN, Site
from tests.polling import until_probe
from tests.processes import children_where

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _private_env(env: dict[str, str]) -> dict[str, str]:
    return {**env, "CLANKIE_BROWSER_ALLOW_PRIVATE": "true"}


def _own_user_env(env: dict[str, str]) -> dict[str, str]:
    """A host that stays with the tree's user keeps its temp root in the state dir and binds its own socket (no
    hand-over); run as root, that also means no sandbox (Chromium will not sandbox as root). The temp root of a host
    apart: tests/hosts/test_browser_apart.py."""
    return {**_private_env(env), "CLANKIE_BROWSER_USER": "root", "CLANKIE_BROWSER_SANDBOX": "off",
            "CLANKIE_HANDOVER": "false"}


def _load(root: Path, art: Artifact) -> bytes:
    digest, rel = art.ref.split(":")[1], art.ref.split(":")[2]
    path = root / rel
    data = path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == digest == art.sha256
    assert len(data) == art.size
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    return data


def test_screenshot_lands_under_the_default_attachment_root(env: dict[str, str], state_dir: Path, tmp_path: Path) -> None:
    """With no attachment-root variable, a screenshot of a local page is a PNG under <state>/attachments whose bytes hash to the ref."""

    async def main() -> None:
        async with Site() as site, HostProcess("browser", _private_env(env), tmp_path / "host.log") as host:
            art = await shoot(host, site.origin + "/")
            assert art.ref.startswith("sha256:") and ":browser/" in art.ref and art.mime == "image/png"
            image = Image.open(io.BytesIO(_load(state_dir / "attachments", art)))
            assert image.format == "PNG" and image.size == (1280, 800)
            assert image.convert("RGB").getpixel((640, 700)) == GREEN
            assert site.hits == ["/"]

    asyncio.run(main())


def test_screenshot_honours_the_attachment_root_override(env: dict[str, str], tmp_path: Path) -> None:
    """With CLANKIE_DISCORD_ATTACHMENT_ROOT set, the screenshot is written under that root and the viewport is honoured."""
    root = tmp_path / "elsewhere" / "attachments"

    async def main() -> None:
        host_env = {**_private_env(env), "CLANKIE_DISCORD_ATTACHMENT_ROOT": str(root)}
        async with Site() as site, HostProcess("browser", host_env, tmp_path / "host.log") as host:
            art = await shoot(host, site.origin + "/", viewport=Viewport(width=640, height=480))
            image = Image.open(io.BytesIO(_load(root, art)))
            assert image.size == (640, 480)
            beat = await host.next_heartbeat()
            assert beat.report["attachment_root"] == str(root)

    asyncio.run(main())


def test_full_page_height_is_capped(env: dict[str, str], state_dir: Path, tmp_path: Path) -> None:
    """A 20,000-pixel page photographed full-page comes back cut at the height cap."""

    async def main() -> None:
        async with Site() as site, HostProcess("browser", _private_env(env), tmp_path / "host.log") as host:
            art = await shoot(host, site.origin + "/tall", full_page=True)
            image = Image.open(io.BytesIO(_load(state_dir / "attachments", art)))
            assert image.size == (1280, MAX_HEIGHT)

    asyncio.run(main())


def test_malformed_requests_are_refused_and_the_host_keeps_serving(env: dict[str, str], tmp_path: Path) -> None:
    """Requests with missing or wrong-typed fields get invalid_request, unknown methods method_not_found, and the next good request still works."""

    async def main() -> None:
        async with Site() as site, HostProcess("browser", _private_env(env), tmp_path / "host.log") as host:
            for params in ({}, {"url": 42}, {"url": "http://x/", "full_page": "maybe"}, {"url": "http://x/", "extra": 1}, [1, 2]):
                error = await raw_call(host.socket, "screenshot", params)
                assert error is not None and error["code"] == "invalid_request", params
            error = await raw_call(host.socket, "draw_er_diagram", {"spec": {}})
            assert error is not None and error["code"] == "method_not_found"
            art = await shoot(host, site.origin + "/")
            assert art.size > 0 and host.alive()

    asyncio.run(main())


def _chromium_pids(host_pid: int) -> list[int]:
    """Live Chromium browser processes under the host: zombies, helpers and forks of Chromium left out."""

    def browser(proc: psutil.Process) -> bool:
        parent = proc.parent()
        forked = parent is not None and "chromium" in parent.name()
        return "chromium" in proc.name() and not forked and "--type=" not in " ".join(proc.cmdline())

    return [p.pid for p in children_where(psutil.Process(host_pid), browser, recursive=True)]


def test_a_killed_browser_is_relaunched_on_the_next_request(env: dict[str, str], tmp_path: Path) -> None:
    """After Chromium is SIGKILLed, the host reports it down, the next screenshot relaunches it, and the heartbeat counts the restart."""

    async def main() -> None:
        async with Site() as site, HostProcess("browser", _private_env(env), tmp_path / "host.log") as host:
            assert host.proc is not None
            await shoot(host, site.origin + "/")
            browsers = _chromium_pids(host.proc.pid)
            assert len(browsers) == 1, [" ".join(psutil.Process(p).cmdline())[:300] for p in browsers]
            os.kill(browsers[0], signal.SIGKILL)
            async def down() -> bool:
                return (await host.next_heartbeat()).report["browser"] == "down"

            await until_probe(down, 10, "the host to notice the dead browser", step=0)
            art = await shoot(host, site.origin + "/")
            assert art.size > 0
            beat = await host.next_heartbeat()
            assert beat.report["browser"] == "up"
            assert beat.report["restarts"] == 1 and beat.report["crashes"] == 1
            assert _chromium_pids(host.proc.pid) != browsers

    asyncio.run(main())


def test_without_chromium_the_host_stays_up_and_refuses(env: dict[str, str], tmp_path: Path) -> None:
    """With no Chromium executable the host still becomes ready, answers every screenshot with browser_unavailable, and keeps running."""

    async def main() -> None:
        host_env = {**_private_env(env), "CLANKIE_CHROMIUM_PATH": str(tmp_path / "no-such-chromium")}
        async with HostProcess("browser", host_env, tmp_path / "host.log") as host:
            for _ in range(2):
                with pytest.raises(RemoteError) as info:
                    await shoot(host, "http://127.0.0.1:9/")
                assert info.value.code == "browser_unavailable"
            assert host.alive()
            beat = await host.next_heartbeat()
            assert beat.report["browser"] == "absent"
            assert beat.report["refused"] == {"browser_unavailable": 2}
            assert await host.shutdown() == 0

    asyncio.run(main())


def test_the_private_temp_dir_is_emptied_at_start(env: dict[str, str], state_dir: Path, tmp_path: Path) -> None:
    """Leftovers of dead hosts in the temp dir are gone once the host is ready; a live process's directory (a host
    beside which a warm spare starts) is left alone; the host works in a directory of its own, gone after SIGTERM."""
    root = state_dir / "tmp" / "browser"
    leftover = root / "playwright_chromiumdev_profile-old"
    leftover.mkdir(parents=True)
    dead = root / "999999999"  # above any pid_max: no such process
    dead.mkdir()
    live = root / str(os.getpid())  # this test's process stands in for a live host
    (live / "profile").mkdir(parents=True)

    async def main() -> None:
        async with HostProcess("browser", _own_user_env(env), tmp_path / "host.log") as host:
            assert not leftover.exists() and not dead.exists()
            assert (live / "profile").is_dir()
            assert host.proc is not None
            assert (root / str(host.proc.pid)).is_dir()
            host.proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(host.proc.wait(), 15) == 0
            assert not host.socket.exists()
            assert host.stopping
            assert not (root / str(host.proc.pid)).exists()

    asyncio.run(main())


def test_a_second_host_starting_on_the_same_state_leaves_the_live_hosts_chromium_alone(
    env: dict[str, str], state_dir: Path, tmp_path: Path
) -> None:
    """A warm spare starts beside the live host on the same state dir: the live host's Chromium and its profile
    survive the spare's start, and its next screenshot works (the spare used to empty the shared temp dir under it)."""

    async def main() -> None:
        with tempfile.TemporaryDirectory(prefix="ck-", dir="/tmp") as other_runtime:
            spare_env = {**_own_user_env(env), "CLANKIE_RUNTIME_DIR": other_runtime}
            async with Site() as site, HostProcess("browser", _own_user_env(env), tmp_path / "live.log") as live:
                await shoot(live, site.origin + "/")  # Chromium up, its profile under the live host's directory
                assert live.proc is not None
                mine = state_dir / "tmp" / "browser" / str(live.proc.pid)
                before = sorted(p.name for p in mine.iterdir())
                assert before
                async with HostProcess("browser", spare_env, tmp_path / "spare.log") as spare:
                    assert spare.proc is not None and (state_dir / "tmp" / "browser" / str(spare.proc.pid)).is_dir()
                    assert sorted(p.name for p in mine.iterdir()) == before
                    art = await shoot(live, site.origin + "/")
                    assert art.mime == "image/png"

    asyncio.run(main())
