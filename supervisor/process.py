"""One supervised child: spawn, link, exit, stop, kill. The I/O shell around :mod:`lifecycle`.

Spawning uses ``os.posix_spawnp`` (PATH lookup for a bare argv[0]) with ``setsid`` (each child leads its own
session and process group) and no ``preexec_fn``. The child inherits exactly
stdin (``/dev/null``), stdout and stderr (pipes) and its end of the link
socketpair. Exit is detected through a pidfd watched by the loop; the
status is collected by the tree's single reaper (:meth:`Tree.reap`), which
calls :meth:`Child.exited`. Signals go to the whole process group, so
grandchildren go with their parent; after the leader dies the group is
swept with SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno as errno_mod
import logging
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from clankie import ipc
from clankie.child import SUPERVISOR_FD_ENV, SUPERVISOR_PID_ENV
from clankie.clock import Clock
from clankie.errors import ChannelBroken, ChannelClosed
from clankie.protocol import Heartbeat, Record, Stopping
from clankie.secrets import SECRETS_FD_ENV, hand_over
from supervisor.environment import for_child
from supervisor.lifecycle import Exit, Lifecycle, State
from supervisor.output import Capture, Forwarder, RotatingLog
from supervisor.spec import ChildSpec
from supervisor.watchdog import Liveness, StallWatchdog

if TYPE_CHECKING:
    from supervisor.tree import Tree

log = logging.getLogger(__name__)


class Child:
    """A child process slot: at most one live process at a time."""

    def __init__(self, spec: ChildSpec, tree: Tree, *, heartbeat_timeout: float, rand: Callable[[], float] | None) -> None:
        self.spec = spec
        self.name = spec.name
        self.tree = tree
        self.clock: Clock = tree.clock
        self.life = Lifecycle(policy=spec.policy, rand=rand)
        self.liveness = Liveness(spec.heartbeat_timeout or heartbeat_timeout)
        settings = tree.settings
        self.stall = (
            StallWatchdog(settings.stall_seconds, settings.stall_abort_grace_seconds) if spec.watch_stalls else None
        )
        self.pid: int | None = None
        self.pidfd: int | None = None
        self.link: ipc.Connection | None = None
        self.attachment_root: str | None = None  # as the live process derived it (its link hello)
        self.captures: list[Capture] = []
        self.stderr_capture: Capture | None = None
        self.detail = ""
        self.last_heartbeat: Heartbeat | None = None
        self.exited_event = asyncio.Event()
        self.exited_event.set()
        self._timer: asyncio.Task[None] | None = None
        self._grace: asyncio.Task[None] | None = None
        self._link_task: asyncio.Task[None] | None = None
        self._ps: psutil.Process | None = None
        logs = tree.log_dir
        self.log = RotatingLog(logs / f"{self.name}.log", tree.log_max_bytes, tree.log_backups, on_problem=tree.changed)

    @property
    def log_path(self) -> Path:
        return self.log.path

    @property
    def alive(self) -> bool:
        return self.pid is not None

    # ------------------------------------------------------------ start

    def start(self) -> None:
        """Start now (idempotent while up); spawn errors go through the backoff like crashes."""
        self._cancel_timer()
        if self.life.state in (State.STARTING, State.RUNNING, State.STOPPING):
            return
        now = self.clock.monotonic()
        self.life.start(now)
        try:
            self._spawn()
        except OSError as exc:
            name = errno_mod.errorcode.get(exc.errno or 0, str(exc.errno))
            log.warning("cannot spawn %s: %s", self.name, name)
            self.life.spawn_failed(now, name)
            self._schedule()
            self.tree.changed()
            return
        self.liveness.arm(now)
        if self.stall is not None:
            self.stall.reset()
        self.tree.changed()

    def _env(self, fd: int) -> dict[str, str]:
        env = for_child(self.tree.child_env, self.tree.full_env, self.spec.passthrough)
        env.update(self.spec.env)
        env[SUPERVISOR_FD_ENV] = str(fd)
        env[SUPERVISOR_PID_ENV] = str(os.getpid())
        env["CLANKIE_CHILD_NAME"] = self.name
        env["PYTHONUNBUFFERED"] = "1"
        if self.spec.heartbeat_seconds is not None:
            env["CLANKIE_HEARTBEAT_SECONDS"] = str(self.spec.heartbeat_seconds)
        return env

    def _secrets_fd(self) -> int | None:
        """A one-shot pipe with the secrets this child's spec names and the settings hold, or None."""
        values = {}
        for name in self.spec.secrets:
            secret = getattr(self.tree.settings, name, None)
            if secret is not None:
                values[name] = secret.get_secret_value()
        return hand_over(values) if values else None

    def _spawn(self) -> None:
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        secrets_fd: int | None = None
        try:
            secrets_fd = self._secrets_fd()
            os.set_inheritable(child_end.fileno(), True)
            env = self._env(child_end.fileno())
            if secrets_fd is not None:
                os.set_inheritable(secrets_fd, True)
                env[SECRETS_FD_ENV] = str(secrets_fd)
            actions = [
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, out_w, 1),
                (os.POSIX_SPAWN_DUP2, err_w, 2),
            ]
            pid = os.posix_spawnp(self.spec.argv[0], list(self.spec.argv), env, file_actions=actions, setsid=True)
        except BaseException:
            for fd in (out_r, err_r):
                os.close(fd)
            parent_end.close()
            raise
        finally:
            child_end.close()
            os.close(out_w)
            os.close(err_w)
            if secrets_fd is not None:
                os.close(secrets_fd)  # the child has its copy; ours must not reach the next spawn
        self.pid = pid
        self.exited_event.clear()
        self._ps = None
        try:
            self.pidfd = os.pidfd_open(pid)
            asyncio.get_running_loop().add_reader(self.pidfd, self.tree.reap)
        except OSError:  # already reaped by a racing SIGCHLD: the reaper handles it
            self.pidfd = None
        fwd = self.tree.stderr
        self.captures = [
            Capture(out_r, self.log, Forwarder(self.name, fwd) if fwd is not None else None),
            Capture(err_r, self.log, Forwarder(self.name, fwd) if fwd is not None else None),
        ]
        self.stderr_capture = self.captures[1]
        self._link_task = asyncio.get_running_loop().create_task(self._open_link(parent_end), name=f"link-{self.name}")
        log.info("started %s pid=%d", self.name, pid)

    async def _open_link(self, sock: socket.socket) -> None:
        pid = self.pid
        try:
            conn = await ipc.from_socket(sock, "supervisor", self._on_link, initiate=False, timeout=self.liveness.timeout)
        except Exception as exc:  # the child never said hello: liveness will notice
            log.info("no link from %s: %s", self.name, type(exc).__name__)
            sock.close()
            return
        if self.pid != pid:
            await conn.aclose()
            return
        self.link = conn
        self.attachment_root = conn.peer.attachment_root if conn.peer is not None else None

    async def _on_link(self, conn: ipc.Connection, method: str, params: Record) -> Record | None:
        if conn is not self.link and self.link is not None:
            return None
        now = self.clock.monotonic()
        if method == "ready":
            self.life.ready(now)
            self.liveness.beat(now)
            log.info("%s is ready", self.name)
            self.tree.changed()
        elif method == "heartbeat":
            assert isinstance(params, Heartbeat)
            self.liveness.beat(now)
            self.last_heartbeat = params
            self.detail = params.detail
            if self.stall is not None:
                self.stall.observe(params, self.clock.boottime())
        elif method == "stopping":
            assert isinstance(params, Stopping)
            log.info("%s says it is stopping", self.name)
        return None

    # ------------------------------------------------------------ exit

    def exited(self, status: Exit) -> None:
        """Called once by the tree's reaper with this process's exit status."""
        pid = self.pid
        self.pid = None
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
        message = self.stderr_capture.last_line.decode("utf-8", "replace").strip() if self.stderr_capture else ""
        self.captures = []
        self.liveness.disarm()
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None
        if self._link_task is not None:
            self._link_task.cancel()
        self.attachment_root = None
        if self.link is not None:
            link, self.link = self.link, None
            self.tree.spawn(link.aclose(), name=f"link-close-{self.name}")
        ex = Exit(
            code=status.code,
            signal=status.signal,
            at=self.clock.wall(),
            core=status.core,
            requested=self.life.state is State.STOPPING,
            message=message[:200],
        )
        state = self.life.exit(ex, self.clock.monotonic())
        log.info("%s pid=%s %s; now %s", self.name, pid, self.life.ended, state.value)
        self.exited_event.set()
        if self.life.restart_now and not self.tree.stopping:  # an operator restart
            self.start()
        else:
            self._schedule()
        self.tree.changed()

    def _schedule(self) -> None:
        """In BACKOFF (or FATAL with a cooldown), start again at next_start_at."""
        self._cancel_timer()
        at = self.life.next_start_at
        if self.life.state not in (State.BACKOFF, State.FATAL) or at is None or self.tree.stopping:
            return
        delay = max(0.0, at - self.clock.monotonic())
        self._timer = asyncio.get_running_loop().create_task(self._start_after(delay), name=f"backoff-{self.name}")

    async def _start_after(self, delay: float) -> None:
        await self.clock.sleep(delay)
        self._timer = None
        if not self.tree.stopping and self.life.state in (State.BACKOFF, State.FATAL):
            self.start()

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer is not asyncio.current_task():
            self._timer.cancel()
        self._timer = None

    # ------------------------------------------------------------ stop / kill

    def signal_group(self, sig: int) -> None:
        if self.pid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)
        if sig == signal.SIGKILL and self.pidfd is not None:
            with contextlib.suppress(ProcessLookupError, OSError):
                signal.pidfd_send_signal(self.pidfd, sig)

    def _terminate(self, grace: float) -> None:
        if self.link is not None and not self.link.closed:
            self.tree.spawn(self._send_shutdown(self.link), name=f"shutdown-{self.name}")
        self.signal_group(signal.SIGTERM)
        self.signal_group(signal.SIGCONT)
        if self._grace is None:
            self._grace = asyncio.get_running_loop().create_task(self._kill_after(grace), name=f"grace-{self.name}")

    async def _send_shutdown(self, link: ipc.Connection) -> None:
        with contextlib.suppress(ChannelBroken, ChannelClosed):  # it is going away anyway: the signal follows
            await link.notify("shutdown", Stopping(reason=self.life.reason))

    async def _kill_after(self, grace: float) -> None:
        await asyncio.sleep(grace)  # grace is real time: the process has to die in it
        self._grace = None
        if self.pid is not None:
            log.warning("%s did not stop within %.1fs; killing it", self.name, grace)
            self.signal_group(signal.SIGKILL)

    async def stop(self, grace: float | None = None) -> None:
        """Stop for good (operator ``stop`` or shutdown) and wait until it is gone."""
        self._cancel_timer()
        self.life.stop()
        if self.pid is not None:
            self._terminate(self.spec.stop_timeout if grace is None else grace)
            await self.exited_event.wait()
        self.tree.changed()

    def kill(self, reason: str, *, counts_as_crash: bool = True) -> None:
        """Take the child down to restart it (``heartbeat``, ``stalled``, or an operator restart)."""
        if self.pid is None:
            if self.life.state in (State.BACKOFF, State.FATAL, State.STOPPED, State.EXITED):
                self.start()
            return
        log.warning("killing %s: %s", self.name, reason)
        self.life.kill(reason, counts_as_crash=counts_as_crash)
        self._terminate(self.spec.stop_timeout)
        self.tree.changed()

    def force(self) -> None:
        """Second SIGTERM/SIGINT: SIGKILL now."""
        self.signal_group(signal.SIGKILL)

    # ------------------------------------------------------------ stats

    def stats(self) -> dict[str, float | int | None]:
        out: dict[str, float | int | None] = {"cpu_percent": None, "rss_bytes": None, "num_fds": None, "threads": None}
        if self.pid is None:
            return out
        try:
            if self._ps is None or self._ps.pid != self.pid:
                self._ps = psutil.Process(self.pid)
                self._ps.cpu_percent(None)
            with self._ps.oneshot():
                out["cpu_percent"] = self._ps.cpu_percent(None)
                out["rss_bytes"] = self._ps.memory_info().rss
                out["num_fds"] = self._ps.num_fds()
                out["threads"] = self._ps.num_threads()
        except (psutil.Error, OSError):
            pass
        return out


def exit_from_waitid(result: os.waitid_result) -> Exit:
    """Turn a ``waitid`` result into an :class:`Exit` (``at`` is filled in by the caller)."""
    if result.si_code == os.CLD_EXITED:
        return Exit(code=result.si_status, signal=None, at=0.0)
    return Exit(code=None, signal=result.si_status, at=0.0, core=result.si_code == os.CLD_DUMPED)

