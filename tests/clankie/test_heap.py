"""clankie.heap: the collector held off through a start, then one collection, the survivors frozen, the collector on.

The collector is process-wide, so each case runs in a fresh interpreter (never in the test worker's).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
START = """
import gc, json, weakref
from clankie import heap
heap.hold()  # as a child's __main__ does, on its first line

class Node:
    pass

def cycles(n):
    \"\"\"n pairs that point at each other and at nothing else: garbage only the collector frees; a weak ref each.\"\"\"
    refs = []
    for _ in range(n):
        a, b = Node(), Node()
        a.other, b.other = b, a
        refs.append(weakref.ref(a))
    return refs

def alive(refs):
    return sum(ref() is not None for ref in refs)
"""
"""The start of every case: the collector held, and a way to make garbage cycles and count the ones left."""


def run(case: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", START + case], cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=True)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_while_held_the_collector_makes_no_pass_and_cycles_wait() -> None:
    report = run("""
refs = cycles(100_000)  # far past the young generation's threshold (700 allocations)
print(json.dumps({"on": gc.isenabled(), "waiting": alive(refs)}))
""")
    assert report == {"on": False, "waiting": 100_000}


def test_settle_frees_the_starts_garbage_freezes_what_it_kept_and_turns_the_collector_on() -> None:
    report = run("""
started = cycles(1000)
kept = [Node() for _ in range(1000)]
frozen = heap.settle()
after = {"on": gc.isenabled(), "start_garbage_left": alive(started), "frozen": frozen}
later = cycles(100_000)  # a turn's cycles: the collector, on again, frees them by itself (no gc.collect() here)
after.update(later_left=alive(later), frozen_now=gc.get_freeze_count(), kept=len(kept))
print(json.dumps(after))
""")
    assert report["on"] is True
    assert report["start_garbage_left"] == 0  # the one collection freed every cycle of the start
    assert isinstance(report["frozen"], int) and report["frozen"] >= 1000  # the kept nodes (and the modules) among them
    assert isinstance(report["later_left"], int) and report["later_left"] < 1000  # at most the youngest generation's
    assert report["frozen_now"] == report["frozen"]  # the later collections thawed nothing
