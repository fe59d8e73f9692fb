"""A child's start with the collector held off and settled (clankie/heap.py) next to one with it on throughout.

Each round starts one fresh interpreter per child kind and variant, interleaved, and
counts its CPU (user + system, from ``RUSAGE_CHILDREN``): what each child's
``__main__`` imports, the service's ``warm()`` (the SDK's import and rehearsal) too,
then ``heap.settle()`` in the shipped variant. Then, in one service process per
variant, the CPU of a full ``gc.collect()`` once warm: what a full collection costs
the event loop during a turn.

Last line: ``bench child_start: service_ms=… service_old_ms=… … collect_ms=… collect_old_ms=…``
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STARTS = {
    "service": "import service.app as app; app.warm()",
    "bridge": "import bridge.app, bridge.doctor, bridge.parked, bridge.discord_client",
    "browser": "import clankie.entry, hosts.runtime, hosts.browser.host",
    "tldraw": "import clankie.entry, hosts.runtime, hosts.tldraw.server",
}
HELD = "from clankie import heap; heap.hold()\n{start}\nheap.settle()"
COLLECT = """
import gc, json, time
{start}
times = []
for _ in range(15):
    t = time.process_time(); gc.collect(); times.append(time.process_time() - t)
print(json.dumps({{"ms": sorted(times)[7] * 1000, "tracked": len(gc.get_objects()), "frozen": gc.get_freeze_count()}}))
"""


def cpu_of(code: str) -> float:
    """CPU seconds of one fresh interpreter running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def collect_of(code: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True, text=True)
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    seen: dict[str, list[float]] = {f"{kind}{old}": [] for kind in STARTS for old in ("", "_old")}
    for _ in range(args.rounds):
        for kind, start in STARTS.items():
            seen[kind].append(cpu_of(HELD.format(start=start)))
            seen[f"{kind}_old"].append(cpu_of(start))
    print(f"{'child':8} {'held, settled':>14} {'collector on':>13} {'ratio':>6}   (median CPU ms of {args.rounds} starts)")
    line = []
    for kind in STARTS:
        new, old = statistics.median(seen[kind]) * 1000, statistics.median(seen[f"{kind}_old"]) * 1000
        print(f"{kind:8} {new:14.0f} {old:13.0f} {new / old:6.2f}")
        line += [f"{kind}_ms={new:.0f}", f"{kind}_old_ms={old:.0f}"]
    settled = collect_of(COLLECT.format(start=HELD.format(start=STARTS["service"])))
    plain = collect_of(COLLECT.format(start=STARTS["service"]))
    print(f"a full collection in a warm service: {settled['ms']:.1f} ms ({settled['tracked']:.0f} objects walked, "
          f"{settled['frozen']:.0f} frozen) against {plain['ms']:.1f} ms ({plain['tracked']:.0f} walked)")
    line += [f"collect_ms={settled['ms']:.1f}", f"collect_old_ms={plain['ms']:.1f}"]
    print("bench child_start: " + " ".join(line))


if __name__ == "__main__":
    main()
