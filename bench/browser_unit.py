"""bench browser_unit: a screenshot turn with the browser host as the tree's child vs in its own unit (issue 24 item 3).

The real tree (``clankie run`` against the loopback fakes, :func:`tests.integration.tree.real_tree`)
answers screenshot turns of a local page, end to end: a person's message in,
the post with its picture out. Two ways, side by side in one run, alternated
over rounds so that drift on a shared machine falls on both:

* ``child``: the default, the supervisor's browser host (as ``nobody`` when run as root);
* ``external``: ``CLANKIE_BROWSER_HOST=external``, the host as its own process (as
  ``nobody`` when run as root), the service verifying each picture by hash from
  the host's directory and copying it under the tree's root.

Per way: the median and p90 of a warm screenshot turn (after one warm-up turn
per tree), and the median of a ``status`` call (the external way probes the
unit's socket with a hello each time).

Run: ``python bench/browser_unit.py [rounds] [turns]`` (default 3 rounds of 8 turns).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clankie.testing import fake_anthropic as fa
from tests.hosts.external import ExternalHost, external_env
from tests.integration.tree import Tree, real_tree

WAYS = ("child", "external")


async def _turns(t: Tree, n: int) -> list[float]:
    out = []
    for i in range(n + 1):
        t.anthropic.script(fa.tool_use(("browser_screenshot", {"url": t.site.url()})), fa.text(f"shot {i}"))
        started = time.perf_counter()
        post = await t.ask(f"clankie, screenshot {i}", timeout=90)
        took = time.perf_counter() - started
        assert post.content == f"shot {i}" and len(post.files) == 1, post
        if i:  # the first turn of a tree warms Chromium up
            out.append(took)
    return out


async def _status(t: Tree, n: int = 10) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        await t.status()
        out.append(time.perf_counter() - started)
    return out


async def _one(way: str, base: Path, turns: int) -> tuple[list[float], list[float]]:
    base.mkdir(parents=True)
    runtime = base / "run"
    runtime.mkdir(mode=0o700)
    if way == "child":
        async with real_tree(base, runtime, {"CLANKIE_BROWSER_ALLOW_PRIVATE": "true"}) as t:
            return await _turns(t, turns), await _status(t)
    unit_env = external_env(base)
    env = {k: unit_env[k] for k in ("CLANKIE_BROWSER_HOST", "CLANKIE_BROWSER_SOCKET", "CLANKIE_BROWSER_ARTIFACTS")}
    async with ExternalHost(unit_env, base / "browser-unit.log"), real_tree(base, runtime, env) as t:
        return await _turns(t, turns), await _status(t)


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(rounds: int, turns: int) -> None:
    shots: dict[str, list[float]] = {w: [] for w in WAYS}
    status: dict[str, list[float]] = {w: [] for w in WAYS}
    with tempfile.TemporaryDirectory(prefix="bench-browser-unit-") as tmp:
        for r in range(rounds):
            for way in WAYS if r % 2 == 0 else tuple(reversed(WAYS)):
                got, st = await _one(way, Path(tmp) / f"{r}-{way}", turns)
                shots[way] += got
                status[way] += st
                print(f"round {r + 1} {way:<8} turn p50 {_ms(got, 0.5):7.1f} ms", flush=True)
    print(f"\n{'way':<9}{'turns':>6}{'p50 ms':>9}{'p90 ms':>9}{'status p50 ms':>15}")
    for way in WAYS:
        print(f"{way:<9}{len(shots[way]):>6}{_ms(shots[way], 0.5):>9.1f}{_ms(shots[way], 0.9):>9.1f}"
              f"{1000 * statistics.median(status[way]):>15.2f}")
    ratio = _ms(shots["external"], 0.5) / _ms(shots["child"], 0.5)
    status_ratio = statistics.median(status["external"]) / statistics.median(status["child"])
    print(f"external/child: turn p50 {ratio:.2f}x, status {status_ratio:.2f}x")
    print(f"bench browser_unit: child_p50_ms={_ms(shots['child'], 0.5):.1f} external_p50_ms={_ms(shots['external'], 0.5):.1f} "
          f"ratio={ratio:.2f} child_p90_ms={_ms(shots['child'], 0.9):.1f} external_p90_ms={_ms(shots['external'], 0.9):.1f} "
          f"status_child_ms={1000 * statistics.median(status['child']):.2f} "
          f"status_external_ms={1000 * statistics.median(status['external']):.2f} turns={turns * rounds}")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    asyncio.run(main(*(args + [3, 8][len(args):])))
