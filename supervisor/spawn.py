"""One spawned process and what the supervisor holds of it: pidfd, output captures, link.

:func:`spawn` is the only place a child process is made, for a cold start
and for a warm spare alike: ``os.posix_spawnp`` (PATH lookup for a bare
argv[0]) with ``setsid`` (each process leads its own session and process
group) and no ``preexec_fn``. It inherits exactly stdin (``/dev/null``),
stdout and stderr (pipes), its end of the link socketpair and, with the
hand-over on, a duplicate of each listening socket its spec serves (named in
``CLANKIE_LISTEN_FDS``). Those duplicates are inheritable only for the
length of that one ``posix_spawn`` call, so no sibling ever holds them.

A :class:`Proc` outlives its owner's interest in it: a spare's Proc is
handed to the child slot when it is taken (:meth:`Proc.hand_to`), and the
link messages follow it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from clankie import ipc
from clankie.child import SUPERVISOR_FD_ENV
from clankie.handover import LISTEN_FDS_ENV, listen_fds_value
from clankie.protocol import Record
from clankie.secrets import SECRETS_FD_ENV
from supervisor.forward import StderrQueue
from supervisor.output import Capture, Forwarder, RotatingLog

log = logging.getLogger(__name__)

LinkHandler = Callable[[ipc.Connection, str, Record], Awaitable[Record | None]]
Linked = Callable[[ipc.Connection], None]


class Proc:
    """A live process: pid, pidfd, its two output captures and (once it said hello) its link."""

    def __init__(self, pid: int, pidfd: int | None, captures: list[Capture], on_link: LinkHandler) -> None:
        self.pid: int | None = pid  # None once released
        self.pidfd = pidfd
        self.captures = captures
        self.on_link = on_link  # where its link messages go: the spare slot, then the child
        self.on_linked: Linked | None = None
        self.link: ipc.Connection | None = None
        self.attachment_root: str | None = None
        self.link_task: asyncio.Task[None] | None = None

    @property
    def stderr_capture(self) -> Capture:
        return self.captures[1]

    def hand_to(self, on_link: LinkHandler, on_linked: Linked) -> None:
        """From now on its link messages go to ``on_link`` (a spare becoming the child)."""
        self.on_link = on_link
        self.on_linked = on_linked
        if self.link is not None:
            on_linked(self.link)

    async def _dispatch(self, conn: ipc.Connection, method: str, params: Record) -> Record | None:
        if self.pid is None:
            return None  # released: a late word from a process that is gone
        return await self.on_link(conn, method, params)

    async def open_link(self, sock: socket.socket, name: str, timeout: float) -> None:
        try:
            conn = await ipc.from_socket(sock, "supervisor", self._dispatch, initiate=False, timeout=timeout)
        except Exception as exc:  # it never said hello: liveness will notice
            log.info("no link from %s: %s", name, type(exc).__name__)
            sock.close()
            return
        if self.pid is None:
            await conn.aclose()
            return
        self.link = conn
        self.attachment_root = conn.peer.attachment_root if conn.peer is not None else None
        if self.on_linked is not None:
            self.on_linked(conn)

    def signal_group(self, sig: int) -> None:
        if self.pid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)
        if sig == signal.SIGKILL and self.pidfd is not None:
            with contextlib.suppress(ProcessLookupError, OSError):
                signal.pidfd_send_signal(self.pidfd, sig)

    def release(self, spawn_task: Callable[[Coroutine[Any, Any, None], str], object], name: str) -> str:
        """After the reaper got its status: sweep its group, drain and close everything; its last stderr line."""
        pid, self.pid = self.pid, None
        if self.pidfd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = None
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # grandchildren left in its group
        for cap in self.captures:
            cap.drain_and_close()
        message = self.stderr_capture.last_line.decode("utf-8", "replace").strip() if self.captures else ""
        if self.link_task is not None:
            self.link_task.cancel()
        if self.link is not None:
            link, self.link = self.link, None
            spawn_task(link.aclose(), f"link-close-{name}")
        return message


def spawn(
    argv: tuple[str, ...],
    env: Mapping[str, str],
    *,
    name: str,
    log_file: RotatingLog,
    forward: StderrQueue | None,
    listeners: Mapping[str, socket.socket],
    on_link: LinkHandler,
    reap: Callable[[], None],
    hello_timeout: float,
    secrets_fd: int | None = None,
) -> Proc:
    """Start one process (see the module docstring); raises ``OSError`` when the exec fails."""
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    handed: dict[str, int] = {}
    try:
        for sock_name, listener in listeners.items():
            handed[sock_name] = os.dup(listener.fileno())  # non-inheritable until just below
            os.set_inheritable(handed[sock_name], True)
        os.set_inheritable(child_end.fileno(), True)
        full_env = dict(env)
        full_env[SUPERVISOR_FD_ENV] = str(child_end.fileno())
        if handed:
            full_env[LISTEN_FDS_ENV] = listen_fds_value(handed)
        if secrets_fd is not None:  # the one-shot pipe of its secrets (clankie.secrets), for this spawn only
            os.set_inheritable(secrets_fd, True)
            full_env[SECRETS_FD_ENV] = str(secrets_fd)
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
        ]
        pid = os.posix_spawnp(argv[0], list(argv), full_env, file_actions=actions, setsid=True)
    except BaseException:
        for fd in (out_r, err_r):
            os.close(fd)
        parent_end.close()
        raise
    finally:
        child_end.close()
        os.close(out_w)
        os.close(err_w)
        for fd in handed.values():
            os.close(fd)
        if secrets_fd is not None:
            os.set_inheritable(secrets_fd, False)
    loop = asyncio.get_running_loop()
    pidfd: int | None
    try:
        pidfd = os.pidfd_open(pid)
        loop.add_reader(pidfd, reap)
    except OSError:  # already reaped by a racing SIGCHLD: the reaper handles it
        pidfd = None
    captures = [
        Capture(out_r, log_file, Forwarder(name, forward) if forward is not None else None),
        Capture(err_r, log_file, Forwarder(name, forward) if forward is not None else None),
    ]
    proc = Proc(pid, pidfd, captures, on_link)
    proc.link_task = loop.create_task(proc.open_link(parent_end, name, hello_timeout), name=f"link-{name}")
    return proc
