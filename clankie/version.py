"""Which build is running: the distribution's version and the source revision it was installed from.

``clankiectl --version`` prints both, and the supervisor exports them as
``clankie_build_info{version, revision}``. The version is the installed
distribution's (``importlib.metadata``). The revision is the commit of the
checkout the package is imported from, read from its ``.git`` as files (a
worktree's ``.git`` file, ``HEAD``, a loose ref or ``packed-refs``; no
``git`` binary, which a hardened unit need not have), or ``unknown`` for an
install that is no checkout. Each read is bounded.
"""

from __future__ import annotations

import functools
import re
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "clankie"
UNKNOWN = "unknown"
MAX_READ = 1 << 20
"""Bytes read of any one git file (``packed-refs`` of a large repository is the longest)."""
_SHA = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")


@functools.cache
def version() -> str:
    """The installed distribution's version, or ``unknown``."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return UNKNOWN


def _read(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return f.read(MAX_READ).decode(errors="replace").strip()
    except OSError:
        return ""


def _git_dirs(checkout: Path) -> tuple[Path, Path] | None:
    """The checkout's git directory and its common directory (they differ in a worktree)."""
    dot = checkout / ".git"
    if dot.is_dir():
        return dot, dot
    text = _read(dot)
    if not text.startswith("gitdir:"):
        return None
    gitdir = (checkout / text.removeprefix("gitdir:").strip()).resolve()
    common = _read(gitdir / "commondir")
    return gitdir, ((gitdir / common).resolve() if common else gitdir)


def revision_of(checkout: Path) -> str:
    """The commit ``checkout`` has checked out (40 hex digits), or ``unknown``."""
    dirs = _git_dirs(checkout)
    if dirs is None:
        return UNKNOWN
    gitdir, common = dirs
    head = _read(gitdir / "HEAD")
    if _SHA.match(head):
        return head  # a detached HEAD
    if not head.startswith("ref:"):
        return UNKNOWN
    ref = head.removeprefix("ref:").strip()
    if ".." in ref.split("/"):
        return UNKNOWN
    loose = _read(common / ref)
    if _SHA.match(loose):
        return loose
    for line in _read(common / "packed-refs").splitlines():
        sha, _, name = line.partition(" ")
        if name == ref and _SHA.match(sha):
            return sha
    return UNKNOWN


@functools.cache
def revision() -> str:
    """The commit this code was imported from, or ``unknown`` (see the module docstring)."""
    return revision_of(Path(__file__).resolve().parents[1])


def describe() -> str:
    """``clankie 0.1.0 (revision 2f2cee0…)``: one line for ``--version``."""
    return f"clankie {version()} (revision {revision()})"
