"""What a test reads from /proc to tell how a process and its descendants are isolated (issue 24)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.procstat import stat_fields

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the browser host goes apart only when the tree runs as root")
"""Marks a test of the browser host apart from the tree's uid: that happens only in a tree run as root (CI is)."""


@dataclass(frozen=True)
class Seen:
    """One process as /proc shows it."""

    pid: int
    argv: tuple[str, ...]
    uid: int
    seccomp: int
    no_new_privs: int
    netns: str
    root: str

    @property
    def kind(self) -> str:
        """Chromium's ``--type=`` (``renderer``, ``zygote``, ...), ``browser`` for Chromium's own, else the program."""
        for arg in " ".join(self.argv).split():  # Chromium's children rewrite their argv into one string
            if arg.startswith("--type="):
                return arg.removeprefix("--type=")
        name = Path(self.argv[0].split()[0]).name if self.argv else "?"
        return "browser" if "chrom" in name else name


def seen(pid: int) -> Seen | None:
    """``pid`` as /proc shows it, or None if it is gone."""
    try:
        argv = tuple(a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a)
        fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
        return Seen(pid, argv, int(fields["Uid"].split()[1]), int(fields["Seccomp"]), int(fields["NoNewPrivs"]),
                    os.readlink(f"/proc/{pid}/ns/net"), os.readlink(f"/proc/{pid}/root"))
    except (FileNotFoundError, ProcessLookupError):
        return None


def descendants(pid: int) -> list[Seen]:
    """Every live descendant of ``pid`` (Chromium leaves the host's process group, not its family)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(stat_fields(entry)[1])
        except (FileNotFoundError, ProcessLookupError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out: list[Seen] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        todo.extend(children.get(child, []))
        found = seen(child)
        if found is not None:
            out.append(found)
    return out


def renderers(pid: int) -> list[Seen]:
    return [p for p in descendants(pid) if p.kind == "renderer"]
