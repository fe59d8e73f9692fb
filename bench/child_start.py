"""A child's start with the collector held off and settled (clankie/heap.py) next to the same with one full
collection before the freeze (as ``heap.settle`` did before the seventeenth session) and with it on throughout.

Each round starts one fresh interpreter per child kind and variant, interleaved, and
counts its CPU (user + system, from ``RUSAGE_CHILDREN``): what each child's
``__main__`` imports, the service's ``warm()`` (the SDK's import and rehearsal) too,
then ``heap.settle()`` in the held variants. Then, in one service process per
variant, the CPU of a full ``gc.collect()`` once warm (what a full collection costs
the event loop during a turn), and what the shipped settle keeps: the objects a
warm service's start made and dropped, frozen with the rest.

Last line: ``bench child_start: service_ms=… service_collected_ms=… service_old_ms=… … collect_ms=… collect_old_ms=…
kept_objects=… kept_kb=…``
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
COLLECTED = "import gc\nfrom clankie import heap; heap.hold()\n{start}\ngc.collect()\nheap.settle()"
VARIANTS = {"": HELD, "_collected": COLLECTED, "_old": "{start}"}
KEPT = """
import gc, json, sys
from clankie import heap; heap.hold()
{start}
gc.set_debug(gc.DEBUG_SAVEALL)
gc.collect()
print(json.dumps({{"objects": len(gc.garbage), "bytes": sum(sys.getsizeof(o) for o in gc.garbage)}}))
"""
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
    seen: dict[str, list[float]] = {f"{kind}{variant}": [] for kind in STARTS for variant in VARIANTS}
    for _ in range(args.rounds):
        for kind, start in STARTS.items():
            for variant, code in VARIANTS.items():
                seen[f"{kind}{variant}"].append(cpu_of(code.format(start=start)))
    print(f"{'child':8} {'held, frozen':>13} {'held, collected':>16} {'collector on':>13} {'ratios':>12}"
          f"   (median CPU ms of {args.rounds} starts)")
    line = []
    for kind in STARTS:
        new, collected, old = (statistics.median(seen[f"{kind}{variant}"]) * 1000 for variant in VARIANTS)
        print(f"{kind:8} {new:13.0f} {collected:16.0f} {old:13.0f} {new / collected:6.2f} {new / old:5.2f}")
        line += [f"{kind}_ms={new:.0f}", f"{kind}_collected_ms={collected:.0f}", f"{kind}_old_ms={old:.0f}"]
    settled = collect_of(COLLECT.format(start=HELD.format(start=STARTS["service"])))
    plain = collect_of(COLLECT.format(start=STARTS["service"]))
    print(f"a full collection in a warm service: {settled['ms']:.1f} ms ({settled['tracked']:.0f} objects walked, "
          f"{settled['frozen']:.0f} frozen) against {plain['ms']:.1f} ms ({plain['tracked']:.0f} walked)")
    line += [f"collect_ms={settled['ms']:.1f}", f"collect_old_ms={plain['ms']:.1f}"]
    kept = collect_of(KEPT.format(start=STARTS["service"]))
    print(f"what a warm service's start made and dropped, frozen by settle: {kept['objects']:.0f} objects, "
          f"{kept['bytes'] / 1024:.0f} kB by their own sizes")
    line += [f"kept_objects={kept['objects']:.0f}", f"kept_kb={kept['bytes'] / 1024:.0f}"]
    print("bench child_start: " + " ".join(line))


if __name__ == "__main__":
    main()
