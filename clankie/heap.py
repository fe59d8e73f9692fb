"""The cyclic garbage collector held off while a process starts, and its start-up heap frozen once it has.

A child's start is mostly imports, and what imports allocate stays: modules, classes, the ~1,500 pydantic models of
the Anthropic SDK and their validators. Each pass the collector makes during a start scans that growing heap and
frees next to nothing; it was 0.4-0.6 of the service's ~2 CPU s to its first ``ready`` (docs/benchmarks.md). So:

* :func:`hold`, at the top of a child's ``__main__`` (before its heavy imports): the collector is off;
* :func:`settle`, in :func:`clankie.entry.run_child` once the imports and the warm-up are done (before a spare
  parks, before a cold child builds its app): one full collection frees what the start did leave as garbage,
  the survivors move to the permanent generation (``gc.freeze``), and the collector is on again.

The frozen objects live as long as the process anyway; a full collection during a turn no longer walks them, so
a turn's collections are cheaper too. Reference counting frees as always; only cycles wait, and only for the
length of a start. A process that never held (started some other way, a test) is settled all the same.
"""

from __future__ import annotations

import gc


def hold() -> None:
    """The collector off until :func:`settle`: call before the imports of a process's start."""
    gc.disable()


def settle() -> int:
    """Collect once, freeze the survivors, turn the collector on; returns how many objects are frozen in all."""
    gc.collect()
    gc.freeze()
    gc.enable()
    return gc.get_freeze_count()
