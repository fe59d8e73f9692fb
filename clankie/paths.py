"""The only place that knows file names: sockets in the runtime dir, state files under the state dir."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from clankie.errors import ConfigError

SUN_PATH_MAX = 107
"""Longest Unix socket path Linux accepts (108 bytes of ``sun_path`` minus the NUL)."""

SOCKETS = ("control", "service", "browser", "tldraw")

SYSTEM_RUNTIME_DIR = Path("/run/clankie")
"""The shipped unit's ``RuntimeDirectory=clankie``: where clankiectl looks when nothing else is set."""


def socket_path(runtime_dir: Path, name: str) -> Path:
    """``<runtime>/<name>.sock``; a path Linux cannot bind is a configuration error."""
    if name not in SOCKETS:
        raise ValueError(f"unknown socket {name!r}")
    path = runtime_dir / f"{name}.sock"
    size = len(os.fsencode(path))
    if size > SUN_PATH_MAX:
        raise ConfigError(
            f"socket path {path} is {size} bytes, over the {SUN_PATH_MAX}-byte Unix socket limit; "
            "set CLANKIE_RUNTIME_DIR to a shorter directory"
        )
    return path


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` private (0700, every missing parent too), or check that an existing one is.

    A directory that already exists is never chmodded, chowned or emptied:
    the project may not have created it. It must be a directory, belong to
    our uid, grant nothing to group or other, and be writable by us; if not,
    :class:`ConfigError` names it and says why (the process exits 78).
    """
    _make_missing(path)
    try:
        st = path.stat()
    except OSError as exc:
        raise ConfigError(f"cannot use {path}: {exc.strerror}") from None
    uid = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"refusing {path}: it exists and is not a directory")
    if st.st_uid != uid:
        raise ConfigError(f"refusing {path}: it belongs to uid {st.st_uid}, not to uid {uid} that runs clankie")
    if st.st_mode & 0o077:
        mode = stat.S_IMODE(st.st_mode)
        raise ConfigError(
            f"refusing {path}: mode {mode:04o} gives group/other access; "
            f"make it private (chmod 0700) or point clankie at another directory"
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"refusing {path}: it is not writable by uid {uid}")
    return path


def make_private_dirs(path: Path) -> Path:
    """``mkdir -p`` for a directory the project owns inside its (already checked) state dir.

    Every component this call creates is 0700 (``Path.mkdir(parents=True)``
    would make the parents 0755); existing ones are left exactly as they
    are. Raises ``OSError`` (a full disk, a file in the way), which the
    caller reports like any other failed write.
    """
    missing: list[Path] = []
    probe = path
    while not _exists(probe):
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for component in reversed(missing):
        try:
            os.mkdir(component, 0o700)
        except FileExistsError:
            continue  # made by another process of the tree a moment ago
    return path


def _exists(path: Path) -> bool:
    """Like ``os.path.lexists``, but a path we may not look at raises instead of reading as missing."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


def _make_missing(path: Path) -> None:
    """:func:`make_private_dirs` for an operator-named directory: a failure is a configuration error."""
    try:
        make_private_dirs(path)
    except OSError as exc:
        raise ConfigError(f"cannot create or reach {exc.filename or path}: {exc.strerror}") from None


LOW_SPACE = 64 * 1024
"""Below this many free bytes the state filesystem is full: the supervisor's status says so, and the bridge holds
what waits for a turn slot (:mod:`bridge.disk`)."""


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on ``path``'s filesystem (None if it cannot be read)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def child_log_dir(state_dir: Path) -> Path:
    return state_dir / "logs"


def captain_dir(state_dir: Path) -> Path:
    return state_dir / "captain"


def receipts_dir(state_dir: Path) -> Path:
    return state_dir / "receipts"


def process_environment() -> Mapping[str, str]:
    """This process's environment: the one place that reads ``os.environ`` (ARCHITECTURE §5).

    A process's ``main`` hands it to :func:`clankie.settings.load` and to the
    kernel helpers that take an ``env`` mapping; ``tests/test_import_rules.py``
    fails on a read anywhere else.
    """
    return os.environ
