"""bench hosts: screenshot latency warm vs cold, and diagram render time by size.

Screenshots go through the real browser host process (``python -m hosts.browser``)
over its real socket, of a local aiohttp page (``CLANKIE_BROWSER_ALLOW_PRIVATE``):

* cold: from spawning the host process to the first PNG artifact (Python
  start, Playwright driver, Chromium launch, first context), median of 3;
* warm: one more screenshot on the running host (fresh context each time),
  median of 10.

Diagrams: the engine's ``render_er`` on 5, 20 and 40 entities in-process
(median of 5), side by side with the same 20-entity diagram requested from the
tldraw host process over its socket (engine + artifact writes + IPC).

Run: ``python bench/hosts.py``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clankie.protocol import DiagramRequest, ScreenshotRequest
from hosts.tldraw.engine import render_er
from hosts.tldraw.examples import er_example
from tests.hosts.hostproc import HostProcess
from tests.hosts.pages import Site


def _env(base: Path, **extra: str) -> dict[str, str]:
    state, runtime = base / "state", base / "run"
    state.mkdir(parents=True, exist_ok=True)
    runtime.mkdir(mode=0o700, exist_ok=True)
    return {"CLANKIE_STATE": str(state), "CLANKIE_RUNTIME_DIR": str(runtime), "HOME": str(state), **extra}


async def _screenshot(host: HostProcess, url: str) -> float:
    conn = await host.client()
    started = time.perf_counter()
    await conn.request("screenshot", ScreenshotRequest(url=url), timeout=70)
    elapsed = time.perf_counter() - started
    await conn.aclose()
    return elapsed * 1000


async def screenshots(base: Path) -> tuple[list[float], list[float]]:
    cold: list[float] = []
    warm: list[float] = []
    async with Site() as site:
        url = site.origin + "/"
        for i in range(3):
            host = HostProcess("browser", _env(base / f"b{i}", CLANKIE_BROWSER_ALLOW_PRIVATE="true"), base / f"b{i}.log")
            started = time.perf_counter()
            async with host:
                await _screenshot(host, url)
                cold.append((time.perf_counter() - started) * 1000)
                if i == 0:
                    for _ in range(10):
                        warm.append(await _screenshot(host, url))
    return cold, warm


def renders() -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for n in (5, 20, 40):
        spec = er_example(n)
        render_er(spec)  # warm fonts and caches
        times = []
        for _ in range(5):
            started = time.perf_counter()
            render_er(spec)
            times.append((time.perf_counter() - started) * 1000)
        out[n] = times
    return out


async def host_render(base: Path) -> list[float]:
    times = []
    async with HostProcess("tldraw", _env(base / "t"), base / "t.log") as host:
        conn = await host.client()
        spec = er_example(20)
        await conn.request("draw_er_diagram", DiagramRequest(spec=spec), timeout=30)
        for _ in range(5):
            started = time.perf_counter()
            await conn.request("draw_er_diagram", DiagramRequest(spec=spec), timeout=30)
            times.append((time.perf_counter() - started) * 1000)
        await conn.aclose()
    return times


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ckb-", dir="/tmp") as tmp:  # short: socket paths
        base = Path(tmp)
        cold, warm = asyncio.run(screenshots(base))
        er = renders()
        via_host = asyncio.run(host_render(base))
    cold_ms, warm_ms = statistics.median(cold), statistics.median(warm)
    er_ms = {n: statistics.median(t) for n, t in er.items()}
    host_ms = statistics.median(via_host)
    print(f"{'screenshot (local page, 1280x800)':<40}{'median ms':>12}{'min':>10}{'max':>10}")
    print(f"{'  cold: spawn host -> first PNG':<40}{cold_ms:>12.0f}{min(cold):>10.0f}{max(cold):>10.0f}")
    print(f"{'  warm: running host, fresh context':<40}{warm_ms:>12.0f}{min(warm):>10.0f}{max(warm):>10.0f}")
    print(f"  cold / warm = {cold_ms / warm_ms:.1f}x")
    print()
    print(f"{'ER diagram render (engine, in-process)':<40}{'median ms':>12}{'min':>10}{'max':>10}")
    for n, times in er.items():
        print(f"{f'  {n} entities':<40}{er_ms[n]:>12.0f}{min(times):>10.0f}{max(times):>10.0f}")
    print(f"  40 / 5 entities = {er_ms[40] / er_ms[5]:.1f}x")
    print(f"{'  20 entities via the tldraw host':<40}{host_ms:>12.0f}{min(via_host):>10.0f}{max(via_host):>10.0f}")
    print(f"  host / in-process (20 entities) = {host_ms / er_ms[20]:.2f}x")
    print(
        f"bench hosts: screenshot_warm_ms={warm_ms:.0f} screenshot_cold_ms={cold_ms:.0f} "
        f"er5_ms={er_ms[5]:.0f} er20_ms={er_ms[20]:.0f} er40_ms={er_ms[40]:.0f}"
    )


if __name__ == "__main__":
    main()
