"""One reading of ``/proc/<pid>/stat`` for the tests and their tools: its fields after the process's name.

The name sits in parentheses and may hold anything (spaces, parentheses), so the fields are split after its last
``)``. Indices, as :func:`stat_fields` returns them: [0] the state (``Z`` a zombie, ``T`` stopped), [1] the parent,
[11] and [12] the user and system clock ticks, [19] the start in clock ticks after boot.
"""

from __future__ import annotations


def stat_fields(pid: int | str) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` (``pid`` may be ``"self"``) after the process's name; raises ``OSError``
    when there is no such process."""
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
        stat = f.read()
    return stat[stat.rindex(")") + 2:].split()
