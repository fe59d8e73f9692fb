"""The cyclic garbage collector held off while a process starts, and its start-up heap frozen once it has.

A child's start is mostly imports, and what imports allocate stays: modules, classes, the ~1,500 pydantic models of
the Anthropic SDK and their validators. Each pass the collector makes during a start scans that growing heap and
frees next to nothing; it was 0.4-0.6 of the service's ~2 CPU s to its first ``ready`` (docs/benchmarks.md). So:

* :func:`hold`, at the top of a child's ``__main__`` (before its heavy imports): the collector is off;
* :func:`settle`, in :func:`clankie.entry.run_child` once the imports and the warm-up are done (before a spare
  parks, before a cold child builds its app): everything the start allocated moves to the permanent generation
  (``gc.freeze``) and the collector is on again.

The frozen objects live as long as the process anyway; a full collection during a turn no longer walks them, so
a turn's collections are cheaper too. Reference counting frees as always; only cycles wait.

The cycles a start made and dropped are frozen with the rest, never freed: in a warm service about 1,800 small
objects (classes the SDK's imports built and discarded, the warm-up's closed client), a few hundred kB of its
~100 MB. Freeing them would take one full collection over the ~200,000 objects a start keeps: 0.12-0.17 s of
CPU on every start of the service, for 0.3 % of its memory (measured by ``bench/child_start.py``; bounded by
``tests/clankie/test_heap.py``). It is the sequence CPython's documentation of ``gc.freeze`` gives for a process
that forks (the collector off early, a freeze once the start is built, no collection between), taken here for the
CPU. A process that never held (started some other way, a test) is settled all the same.
"""

from __future__ import annotations

import gc


def hold() -> None:
    """The collector off until :func:`settle`: call before the imports of a process's start."""
    gc.disable()


def settle() -> None:
    """Freeze everything tracked so far, the start's dropped cycles among it, and turn the collector on.

    No count is taken: ``gc.get_freeze_count`` walks the whole permanent generation (22 ms in a warm service).
    """
    gc.freeze()
    gc.enable()
