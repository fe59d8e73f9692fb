"""The only place that knows file names: sockets in the runtime dir, state files under the state dir."""

from __future__ import annotations

import os
from pathlib import Path

from clankie.errors import ConfigError

SUN_PATH_MAX = 107
"""Longest Unix socket path Linux accepts (108 bytes of ``sun_path`` minus the NUL)."""

SOCKETS = ("control", "service", "browser", "tldraw")


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
    """Create ``path`` (and parents) and make sure it is 0700 and ours."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise ConfigError(f"{path} belongs to uid {st.st_uid}, not to us ({os.getuid()})")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def child_log_dir(state_dir: Path) -> Path:
    return state_dir / "logs"


def captain_dir(state_dir: Path) -> Path:
    return state_dir / "captain"


def receipts_dir(state_dir: Path) -> Path:
    return state_dir / "receipts"
