"""clankie.heap: the collector held off through a start, then all the start built frozen, the collector on.

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


def test_settle_freezes_all_the_start_built_and_turns_the_collector_on_for_what_comes_after() -> None:
    report = run("""
started = cycles(1000)  # a start's dropped cycles: frozen with the rest, never collected
kept = [Node() for _ in range(1000)]
heap.settle()
frozen = gc.get_freeze_count()
gc.collect()  # a full collection walks nothing frozen: the start's cycles stay
after = {"on": gc.isenabled(), "start_garbage_left": alive(started), "frozen": frozen}
later = cycles(100_000)  # a turn's cycles: the collector, on again, frees them by itself (no gc.collect() here)
after.update(later_left=alive(later), frozen_now=gc.get_freeze_count(), kept=len(kept))
print(json.dumps(after))
""")
    assert report["on"] is True
    assert report["start_garbage_left"] == 1000  # frozen, as CPython's advice for gc.freeze has it: no collection first
    assert isinstance(report["frozen"], int) and report["frozen"] >= 4000  # the start's cycles and kept nodes, and more
    assert isinstance(report["later_left"], int) and report["later_left"] < 1000  # at most the youngest generation's
    assert report["frozen_now"] == report["frozen"]  # the later collections thawed nothing


def test_a_warm_services_start_leaves_little_garbage_to_freeze() -> None:
    """The price of freezing without a collection, bounded: what a real service start (its imports and ``warm()``,
    the SDK's rehearsal included) made and dropped. Measured: about 1,800 objects, 0.36 MB by their own sizes."""
    report = run("""
import sys
import service.app as app
app.warm()
gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection would free, kept in gc.garbage to be counted
gc.collect()
print(json.dumps({"objects": len(gc.garbage), "bytes": sum(sys.getsizeof(o) for o in gc.garbage)}))
""")
    assert isinstance(report["objects"], int) and 0 < report["objects"] < 5_000
    assert isinstance(report["bytes"], int) and report["bytes"] < 1_000_000
