"""A listening socket's file: bound 0600 from its first moment, a stale one replaced, a live one refused.

The one place a listening Unix socket is made. :func:`bind_listener` is what
a server (:class:`clankie.ipc.Server`) and the supervisor, which binds every
child's socket before the child starts (``supervisor.tree``), both use;
:func:`listen_private` binds a path already known to be free (the browser
host's own socket when it runs apart, ``hosts.browser.apart``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
from pathlib import Path

from clankie.errors import ConfigError
from clankie.waits import within

log = logging.getLogger(__name__)

LIVE_SOCKET_CHECKS = 6
LIVE_SOCKET_PAUSE = 0.5


async def bind_listener(path: Path, backlog: int = 128) -> socket.socket:
    """A listening socket at ``path``: 0600 from the first moment, a stale file replaced, a live server refused."""
    await _clear_stale_socket(path)
    return listen_private(path, backlog)


def listen_private(path: Path, backlog: int = 128) -> socket.socket:
    """A listening socket bound at the free ``path``, its file 0600 from the first moment."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # no window in which the file is connectable by others
    try:
        sock.bind(os.fspath(path))
    except BaseException:
        sock.close()
        raise
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(backlog)
    return sock


async def _clear_stale_socket(path: Path) -> None:
    """Unlink a socket file nobody answers on; refuse to start over a live one."""
    try:
        st = path.lstat()  # noqa: ASYNC240 (one stat of a socket file in the runtime dir, at start)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise ConfigError(f"{path} exists and is not a socket; refusing to replace it")
    for attempt in range(LIVE_SOCKET_CHECKS):  # a dying tree's last process may still hold it: give it a moment
        try:
            _reader, writer = await within(asyncio.open_unix_connection(os.fspath(path)), 1.0)
        except (OSError, TimeoutError):
            log.info("removing stale socket %s", path)
            path.unlink(missing_ok=True)  # noqa: ASYNC240 (one unlink in the runtime dir, at start)
            return
        writer.close()
        with contextlib.suppress(OSError, TimeoutError):  # closed before the next probe: the server sees EOF now
            await within(writer.wait_closed(), 1.0)
        if attempt + 1 < LIVE_SOCKET_CHECKS:
            await asyncio.sleep(LIVE_SOCKET_PAUSE)
    raise ConfigError(f"another server is already listening on {path}")
