"""bench hosts: screenshot latency warm vs cold with Chromium's sandbox on and off, and diagram render time by size.

Screenshots go through the real browser host process (``python -m hosts.browser``)
over its real socket, of a local aiohttp page (``CLANKIE_BROWSER_ALLOW_PRIVATE``):

* cold: from spawning the host process to the first PNG artifact (Python
  start, Playwright driver, Chromium launch, first context), median of 3;
* warm: one more screenshot on the running host (fresh context each time),
  median of 10;
* idle memory: the host's whole family (Python, Node, every Chromium
  process) once the warm shots are done and Chromium sits idle, as the sum
  of PSS (shared pages split between the processes that share them) and of
  RSS.

Each of three ways, side by side (issue 24): ``sandbox on`` (the default:
run as root, the host goes apart as ``nobody`` and Chromium sandboxes itself),
``sandbox off`` (the same user, ``CLANKIE_BROWSER_SANDBOX=off``: what the
sandbox alone costs) and ``root, no sandbox`` (the tree before issue 24). Run
as another user, the first two are the only ones.

Diagrams: the engine's ``render_er`` on 5, 20 and 40 entities in-process
(median of 5), side by side with the same 20-entity diagram requested from the
tldraw host process over its socket (engine + artifact writes + IPC).

Run: ``python bench/hosts.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

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


WAYS: dict[str, dict[str, str]] = {
    "sandbox on": {},
    "sandbox off": {"CLANKIE_BROWSER_SANDBOX": "off"},
    "root, no sandbox": {"CLANKIE_BROWSER_SANDBOX": "off", "CLANKIE_BROWSER_USER": "root", "CLANKIE_HANDOVER": "false"},
}


@dataclass
class Way:
    cold: list[float] = field(default_factory=list)
    warm: list[float] = field(default_factory=list)
    pss: float = 0.0  # MiB, the host's family idle
    rss: float = 0.0
    processes: int = 0


def family_memory(pid: int) -> tuple[float, float, int]:
    """Sum of PSS and of RSS (MiB) of ``pid`` and every descendant, and how many processes that is."""
    root = psutil.Process(pid)
    pss = rss = 0
    procs = [root, *root.children(recursive=True)]
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            info = proc.memory_full_info()
            pss += info.pss
            rss += info.rss
    return pss / 2**20, rss / 2**20, len(procs)


async def screenshots(base: Path, name: str, extra: dict[str, str]) -> Way:
    way = Way()
    async with Site() as site:
        url = site.origin + "/"
        for i in range(3):
            env = _env(base / f"{name[:4]}{i}", CLANKIE_BROWSER_ALLOW_PRIVATE="true", **extra)
            host = HostProcess("browser", env, base / f"{name[:4]}{i}.log")
            started = time.perf_counter()
            async with host:
                await _screenshot(host, url)
                way.cold.append((time.perf_counter() - started) * 1000)
                if i == 0:
                    for _ in range(10):
                        way.warm.append(await _screenshot(host, url))
                    await asyncio.sleep(2.0)  # sleep: let the last context's renderer go, so the family is idle
                    assert host.proc is not None
                    way.pss, way.rss, way.processes = family_memory(host.proc.pid)
    return way


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
    ways = WAYS if os.geteuid() == 0 else {k: v for k, v in WAYS.items() if not k.startswith("root")}
    with tempfile.TemporaryDirectory(prefix="ckb-", dir="/tmp") as tmp:  # short: socket paths
        base = Path(tmp)
        seen = {name: asyncio.run(screenshots(base, name, extra)) for name, extra in ways.items()}
        er = renders()
        via_host = asyncio.run(host_render(base))
    med = {name: (statistics.median(w.cold), statistics.median(w.warm)) for name, w in seen.items()}
    er_ms = {n: statistics.median(t) for n, t in er.items()}
    host_ms = statistics.median(via_host)
    print(f"{'screenshot (local page, 1280x800)':<34}" + "".join(f"{name:>18}" for name in seen))
    print(f"{'  cold: spawn -> first PNG, ms':<34}" + "".join(f"{med[n][0]:>18.0f}" for n in seen))
    print(f"{'  warm: fresh context, ms':<34}" + "".join(f"{med[n][1]:>18.0f}" for n in seen))
    print(f"{'  idle family PSS, MiB':<34}" + "".join(f"{w.pss:>18.0f}" for w in seen.values()))
    print(f"{'  idle family RSS, MiB':<34}" + "".join(f"{w.rss:>18.0f}" for w in seen.values()))
    print(f"{'  processes':<34}" + "".join(f"{w.processes:>18}" for w in seen.values()))
    on, off = seen["sandbox on"], seen["sandbox off"]
    cold_x, warm_x = med["sandbox on"][0] / med["sandbox off"][0], med["sandbox on"][1] / med["sandbox off"][1]
    print(f"  sandbox on / off: cold {cold_x:.2f}x, warm {warm_x:.2f}x, idle PSS {on.pss / off.pss:.2f}x")
    print()
    print(f"{'ER diagram render (engine, in-process)':<40}{'median ms':>12}{'min':>10}{'max':>10}")
    for n, times in er.items():
        print(f"{f'  {n} entities':<40}{er_ms[n]:>12.0f}{min(times):>10.0f}{max(times):>10.0f}")
    print(f"  40 / 5 entities = {er_ms[40] / er_ms[5]:.1f}x")
    print(f"{'  20 entities via the tldraw host':<40}{host_ms:>12.0f}{min(via_host):>10.0f}{max(via_host):>10.0f}")
    print(f"  host / in-process (20 entities) = {host_ms / er_ms[20]:.2f}x")
    print(
        f"bench hosts: screenshot_warm_ms={med['sandbox on'][1]:.0f} screenshot_cold_ms={med['sandbox on'][0]:.0f} "
        f"unsandboxed_warm_ms={med['sandbox off'][1]:.0f} unsandboxed_cold_ms={med['sandbox off'][0]:.0f} "
        f"warm_x={warm_x:.2f} cold_x={cold_x:.2f} idle_pss_mib={on.pss:.0f} unsandboxed_idle_pss_mib={off.pss:.0f} "
        f"er5_ms={er_ms[5]:.0f} er20_ms={er_ms[20]:.0f} er40_ms={er_ms[40]:.0f}"
    )


if __name__ == "__main__":
    main()
