"""A process's children looked at while they come and go (psutil)."""

from __future__ import annotations

from collections.abc import Callable

import psutil


def children_where(parent: psutil.Process, keep: Callable[[psutil.Process], bool],
                   recursive: bool = False) -> list[psutil.Process]:
    """``parent``'s children (every descendant when ``recursive``) for which ``keep`` holds.

    A child listed and then gone before ``keep`` has looked at it (``psutil.NoSuchProcess``, and so
    ``psutil.ZombieProcess`` where a zombie's details are closed) is left out: it is not there to be anything.
    """
    found = []
    for child in parent.children(recursive=recursive):
        try:
            if keep(child):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found
