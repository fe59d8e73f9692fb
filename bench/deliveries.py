"""bench deliveries: event-loop time of one accept + join + settle, one-file-per-delivery store against the log.

Both stores run inside a live event loop, so their syncs go to the sync
threads as in the service; only the synchronous calls are timed (the loop is
given a turn between cycles, untimed, for the sync rounds to finish). Each
cycle is one delivery: accept, join a run, settle with a ~1.4 kB reply (about
the size of a real record). Old and new alternate, ``--rounds`` times each, on
a fresh directory under ``--dir`` (default: the temporary directory; use
the state directory's disk, not a tmpfs, for numbers that mean something). Also timed: ``load`` of an unknown id (every
first submission) and of a settled one (a re-submission, read back from disk).

The old store is read from git (``--old-ref``, default the last commit with
one file per delivery). Run: ``.venv/bin/python bench/deliveries.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clankie.clock import SystemClock
from clankie.protocol import TurnResult
from service.captain.deliveries import store as new_module

REPO = Path(__file__).resolve().parents[1]
OLD_REF = "9d47750"
FP = "f" * 64
RESULT = TurnResult.settled("word " * 280, turn_id="turn-1-x")


def old_module(ref: str) -> ModuleType:
    source = subprocess.run(["git", "show", f"{ref}:service/captain/deliveries/store.py"], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory(prefix="bench-deliveries-") as tmp:
        path = Path(tmp) / "old_deliveries.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location("old_deliveries", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
    return module


async def cycles(make: Callable[[Path], Any], directory: Path, n: int) -> dict[str, list[float]]:
    store = make(directory)
    store.prune()
    timed: dict[str, list[float]] = {"cycle": [], "load_unknown": [], "load_settled": []}
    clock = time.perf_counter
    for i in range(n):
        did = str(1_300_000_000_000_000_000 + i)
        t0 = clock()
        store.load(did)
        t1 = clock()
        store.accept(did, FP)
        store.join(f"run-{i}", [did])
        store.settle(did, RESULT)
        t2 = clock()
        timed["load_unknown"].append(t1 - t0)
        timed["cycle"].append(t2 - t1)
        await asyncio.sleep(0)
    for i in range(0, n, 10):
        t0 = clock()
        assert store.load(str(1_300_000_000_000_000_000 + i)) is not None
        timed["load_settled"].append(clock() - t0)
    await asyncio.sleep(0.2)  # let the last syncs finish before the next store starts
    return timed


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[int(len(ordered) * 0.99) - 1]
    mean, p50 = statistics.fmean(samples), statistics.median(samples)
    return f"mean {mean * 1e6:7.1f} µs  p50 {p50 * 1e6:7.1f} µs  p99 {p99 * 1e6:7.1f} µs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--old-ref", default=OLD_REF)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    old = old_module(args.old_ref)
    stores = {
        "old (file per delivery)": lambda d: old.DeliveryStore(d, SystemClock()),
        "new (segmented log)": lambda d: new_module.DeliveryStore(d, SystemClock()),
    }
    results: dict[str, dict[str, list[float]]] = {name: {} for name in stores}
    with tempfile.TemporaryDirectory(prefix="bench-deliveries-", dir=args.dir) as root:
        for r in range(args.rounds):
            for name, make in stores.items():
                timed = asyncio.run(cycles(make, Path(root) / f"{r}-{name.split()[0]}", args.cycles))
                for key, values in timed.items():
                    results[name].setdefault(key, []).extend(values)
    for key in ("cycle", "load_unknown", "load_settled"):
        print(key)
        for name in stores:
            print(f"  {name:24} {summary(results[name][key])}")
    old_p50 = statistics.median(results["old (file per delivery)"]["cycle"])
    new_p50 = statistics.median(results["new (segmented log)"]["cycle"])
    print(f"bench deliveries: cycles={args.cycles}x{args.rounds} old_p50_us={old_p50 * 1e6:.1f} "
          f"new_p50_us={new_p50 * 1e6:.1f} speedup={old_p50 / new_p50:.1f}")


if __name__ == "__main__":
    main()
