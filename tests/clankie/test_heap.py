"""clankie.heap: the collector held off through a start, then one collection, the survivors frozen, the collector on.

The collector is process-wide, so each case runs in a fresh interpreter (never in the test worker's).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

def run(script: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_while_held_the_collector_makes_no_pass_and_cycles_wait() -> None:
    report = run("""
import gc, json, weakref
from clankie import heap
heap.hold()
class Node:
    pass
refs = []
for _ in range(100_000):  # far past the young generation's threshold (700 allocations)
    a, b = Node(), Node()
    a.other, b.other = b, a
    refs.append(weakref.ref(a))
    del a, b
print(json.dumps({"on": gc.isenabled(), "waiting": sum(r() is not None for r in refs)}))
""")
    assert report == {"on": False, "waiting": 100_000}


def test_settle_frees_the_starts_garbage_freezes_what_it_kept_and_turns_the_collector_on() -> None:
    report = run("""
import gc, json, weakref
from clankie import heap
heap.hold()
class Node:
    pass
refs = []
for _ in range(1000):
    a, b = Node(), Node()
    a.other, b.other = b, a
    refs.append(weakref.ref(a))
    del a, b
kept = [Node() for _ in range(1000)]
frozen = heap.settle()
later = []
for _ in range(1000):  # a turn's cycles, after the start: the collector frees them on its own
    a, b = Node(), Node()
    a.other, b.other = b, a
    later.append(weakref.ref(a))
    del a, b
gc.collect()
print(json.dumps({"on": gc.isenabled(), "start_garbage_left": sum(r() is not None for r in refs),
                  "frozen": frozen, "frozen_now": gc.get_freeze_count(), "kept": len(kept),
                  "later_left": sum(r() is not None for r in later)}))
""")
    assert report["on"] is True
    assert report["start_garbage_left"] == 0  # the one collection freed every cycle of the start
    assert isinstance(report["frozen"], int) and report["frozen"] >= 1000  # the kept nodes (and the modules) among them
    assert report["frozen_now"] == report["frozen"]  # a later full collection does not thaw them
    assert report["later_left"] == 0
