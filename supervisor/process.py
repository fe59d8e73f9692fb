"""One supervised child: start, link, exit, stop, kill. The I/O shell around :mod:`lifecycle`.

Every input reaches the lifecycle through one entry, :meth:`Child._feed`,
which hands it to :meth:`Lifecycle.handle` and carries out the returned
actions in one exhaustive ``match`` (:meth:`Child._obey`); the shell never
decides from the state. Its own only rule: a stopping tree starts nothing
(a ``start`` is not fed while :attr:`Owner.stopping`).

A start takes the child's parked warm spare when there is one
(:mod:`supervisor.spare`: it is sent ``activate`` and becomes the child,
pid and all) and otherwise spawns cold (:func:`supervisor.spawn.spawn`:
``posix_spawnp`` with ``setsid``, exactly stdio, the link and its listening
sockets inherited). Exit is detected through a pidfd watched by the loop;
the status is collected by the tree's single reaper (:meth:`Tree.reap`),
which calls :meth:`Child.exited`. Signals go to the whole process group, so
grandchildren go with their parent; after the leader dies the group is
swept with SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno as errno_mod
import functools
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import assert_never

from clankie import ipc
from clankie.child import SUPERVISOR_PID_ENV
from clankie.clock import Clock
from clankie.errors import ChannelBroken, ChannelClosed
from clankie.protocol import Empty, Heartbeat, Stopping
from clankie.router import Router, ignore
from clankie.secrets import ROUTE_PREFIX, hand_over
from clankie.settings import Settings
from supervisor.environment import for_child
from supervisor.lifecycle import OPERATOR, Action, Event, Exit, Lifecycle
from supervisor.metrics import Lives
from supervisor.output import RotatingLog
from supervisor.owner import Owner
from supervisor.spare import Spare
from supervisor.spawn import LinkHandler, Proc, spawn
from supervisor.spec import ChildSpec
from supervisor.watchdog import Liveness, StallWatchdog

log = logging.getLogger(__name__)


def handed_secrets(names: tuple[str, ...], settings: Settings) -> dict[str, str]:
    """The secrets among ``names`` (a spec's) that the settings hold, by field. The DSN only in the postgres
    profile: in the files profile no child holds a database's password it might find set."""
    values = {}
    for name in names:
        if name == "postgres_dsn" and settings.store != "postgres":
            continue
        secret = getattr(settings, name, None)
        if secret is not None:
            values[name] = secret.get_secret_value()
    return values


class Child:
    """A child process slot: at most one live process at a time."""

    def __init__(self, spec: ChildSpec, tree: Owner, *, heartbeat_timeout: float, rand: Callable[[], float] | None) -> None:
        self.spec = spec
        self.name = spec.name
        self.tree: Owner = tree
        self.clock: Clock = tree.clock
        self.life = Lifecycle(policy=spec.policy, rand=rand)
        self.liveness = Liveness(spec.heartbeat_timeout or heartbeat_timeout, first=spec.start_timeout)
        settings = tree.settings
        self.stall = (
            StallWatchdog(settings.stall_seconds, settings.stall_abort_grace_seconds) if spec.watch_stalls else None
        )
        self.proc: Proc | None = None
        self.link: ipc.Connection | None = None  # the live process's link, once it said hello
        self.detail = ""
        self.last_heartbeat: Heartbeat | None = None
        self.exited_event = asyncio.Event()
        self.exited_event.set()
        self._timer: asyncio.Task[None] | None = None
        self._grace: asyncio.Task[None] | None = None
        self.metrics = Lives()  # what its processes reported for the metrics endpoint, lives added up
        self.spare_takeovers = 0
        self.spare = Spare(self, rand=rand)
        logs = tree.log_dir
        self.log = RotatingLog(logs / f"{self.name}.log", tree.log_max_bytes, tree.log_backups, on_problem=tree.changed)

    @property
    def log_path(self) -> Path:
        return self.log.path

    @property
    def alive(self) -> bool:
        return self.pid is not None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def pidfd(self) -> int | None:
        return self.proc.pidfd if self.proc is not None else None

    @property
    def attachment_root(self) -> str | None:
        """What the live process derived (its link hello)."""
        return self.proc.attachment_root if self.proc is not None and self.link is not None else None

    # ------------------------------------------------------------ start

    def start(self, reason: str = "") -> None:
        """Start now (the lifecycle ignores it while up); spawn errors go through the backoff like crashes.

        ``reason`` is :data:`~supervisor.lifecycle.OPERATOR` for ``clankiectl start`` (a restart it causes is
        counted as the operator's, not as the crash before it).
        """
        self._feed(Event.START, reason=reason)

    # ------------------------------------------------------------ the one entry

    def _feed(self, event: Event, *, ex: Exit | None = None, reason: str = "", counts_as_crash: bool = True,
              grace: float | None = None) -> None:
        """Hand one input to the lifecycle and do what it answers: the only caller of :meth:`Lifecycle.handle`.

        ``grace`` is how long a TERMINATE waits before SIGKILL (the child's ``stop_timeout`` when None).
        """
        if event is Event.START and self.tree.stopping:
            return  # a stopping tree starts nothing: not an operator start, a backoff's end or a restart
        now = self.clock.monotonic()
        for action in self.life.handle(event, now, ex=ex, reason=reason, counts_as_crash=counts_as_crash):
            self._obey(action, now, self.spec.stop_timeout if grace is None else grace)
        self.tree.changed()

    def _obey(self, action: Action, now: float, grace: float) -> None:
        match action:
            case Action.UNSCHEDULE:
                self._cancel_timer()
            case Action.SPAWN:
                try:
                    self._spawn(now)
                except OSError as exc:
                    name = errno_mod.errorcode.get(exc.errno or 0, str(exc.errno))
                    log.warning("cannot spawn %s: %s", self.name, name)
                    self._feed(Event.SPAWN_FAILED, reason=name)
            case Action.TERMINATE:
                self._terminate(grace)
            case Action.SCHEDULE:
                self._schedule(now)
            case Action.RESTART:
                self._feed(Event.START)
            case Action.WANT_SPARE:
                self.tree.want_spare(self.spare)
            case Action.DROP_SPARE:
                self.spare.drop()  # a spare would only fail the same way, or is not wanted
            case _:
                assert_never(action)

    def env(self, *, spare: bool = False) -> dict[str, str]:
        """The environment of one of this child's processes (a spare's says so): allowlisted, no secret."""
        env = for_child(self.tree.child_env, self.tree.full_env, self.spec.passthrough,
                        store="postgres_dsn" in self.spec.secrets)
        env.update(self.spec.env)
        env[SUPERVISOR_PID_ENV] = str(os.getpid())
        env["CLANKIE_CHILD_NAME"] = self.name
        env["PYTHONUNBUFFERED"] = "1"
        if self.spec.heartbeat_seconds is not None:
            env["CLANKIE_HEARTBEAT_SECONDS"] = str(self.spec.heartbeat_seconds)
        if spare:
            env["CLANKIE_SPARE"] = "1"
        return env

    def _secrets_fd(self) -> int | None:
        """A one-shot pipe with the secrets this child's spec names and the settings hold, or None."""
        values = handed_secrets(self.spec.secrets, self.tree.settings)
        if "anthropic_api_key" in self.spec.secrets:  # the model's child holds the fallback routes' secrets too
            settings = self.tree.settings
            for route in settings.model_routes:
                routed = settings.route_secret(route.name)
                if routed is not None and route.credential is not None:
                    values[ROUTE_PREFIX + route.credential] = routed.get_secret_value()
        return hand_over(values) if values else None

    def spawn_proc(self, on_link: LinkHandler, *, spare: bool = False) -> Proc:
        """A new process of this child (cold, or a spare); raises ``OSError`` when the exec fails."""
        secrets_fd = self._secrets_fd()
        try:
            return spawn(
                self.spec.argv,
                self.env(spare=spare),
                name=self.name,
                log_file=self.log,
                forward=None if self.tree.native_journal else self.tree.stderr,  # native entries: not twice
                listeners=self.tree.listeners_for(self.spec),
                on_link=on_link,
                reap=self.tree.reap,
                hello_timeout=self.liveness.first,  # its hello comes after its imports, as its first beat
                secrets_fd=secrets_fd,
            )
        finally:
            if secrets_fd is not None:
                os.close(secrets_fd)  # the child has its copy; ours must not reach the next spawn

    def _spawn(self, now: float) -> None:
        proc = self.spare.take()
        how = "from its warm spare"
        if proc is None:
            proc = self.spawn_proc(self._on_link)
            how = "cold"
        else:
            self.spare_takeovers += 1
        self.proc = proc
        self.link = None
        self.exited_event.clear()
        self.last_heartbeat = None  # the new process's own figures, once it beats
        self.metrics.end()
        proc.hand_to(self._on_link, self._linked)
        if how != "cold":
            self.tree.spawn(self._activate(proc), name=f"activate-{self.name}")
        self.liveness.arm(now, cold=how == "cold")
        if self.stall is not None:
            self.stall.reset()
        log.info("started %s pid=%d (%s)", self.name, proc.pid, how)

    def _linked(self, conn: ipc.Connection) -> None:
        if self.proc is not None and self.proc.link is conn:
            self.link = conn
            self.tree.changed()  # among other things, it hears who may dial its socket (supervisor.peers)

    async def _activate(self, proc: Proc) -> None:
        if proc.link is None or proc.link.closed:
            return  # it died on the way: the reaper handles it
        with contextlib.suppress(ChannelBroken, ChannelClosed):
            await proc.link.notify("activate", Empty())

    @functools.cached_property
    def _on_link(self) -> Router:
        """What the child's process says on its link (a spare's ``parked`` is the spare's business)."""
        return Router("supervisor", {"ready": self._ready, "heartbeat": self._heartbeat,
                                     "stopping": self._stopping, "parked": ignore})

    def _current(self, conn: ipc.Connection) -> bool:
        return conn is self.link or self.link is None

    def _ready(self, conn: ipc.Connection, params: Empty) -> None:
        if not self._current(conn):
            return
        self.liveness.beat(self.clock.monotonic())
        log.info("%s says it is ready", self.name)  # a late word from a process being killed changes nothing
        self._feed(Event.READY)

    def _heartbeat(self, conn: ipc.Connection, params: Heartbeat) -> None:
        if not self._current(conn):
            return
        self.liveness.beat(self.clock.monotonic())
        self.last_heartbeat = params
        self.detail = params.detail
        if params.metrics is not None and self.pid is not None:
            self.metrics.observe(self.pid, params.metrics)
        if self.stall is not None:
            self.stall.observe(params, self.clock.boottime())

    def _stopping(self, conn: ipc.Connection, params: Stopping) -> None:
        if self._current(conn):
            log.info("%s says it is stopping", self.name)

    # ------------------------------------------------------------ exit

    def exited(self, status: Exit) -> None:
        """Called once by the tree's reaper with this process's exit status."""
        proc, self.proc = self.proc, None
        pid = proc.pid if proc is not None else None
        self.link = None
        self.metrics.end()  # its counters join the finished lives; its gauges go with it
        message = proc.release(self.tree.spawn, self.name) if proc is not None else ""
        self.liveness.disarm()
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None
        ex = Exit(code=status.code, signal=status.signal, at=self.clock.wall(), core=status.core, message=message[:200])
        self.exited_event.set()  # before the actions: an operator restart spawns the next process at once
        self._feed(Event.EXIT, ex=ex)
        # a crash, a watchdog kill's end or a configuration error is a warning (journalctl -p warning lists it);
        # the end of a stop or an operator's restart is not
        level = logging.INFO if self.life.cause == OPERATOR else logging.WARNING
        log.log(level, "%s pid=%s %s (%s); now %s", self.name, pid, self.life.ended, self.life.cause,
                self.life.state.value)

    def _schedule(self, now: float) -> None:
        """SCHEDULE: feed START at ``next_start_at`` (the end of a backoff or a fatal cooldown)."""
        self._cancel_timer()
        at = self.life.next_start_at
        delay = 0.0 if at is None else max(0.0, at - now)
        if at is not None:
            log.info("%s starts again in %.3fs", self.name, delay)
        self._timer = asyncio.get_running_loop().create_task(self._start_after(delay), name=f"backoff-{self.name}")

    async def _start_after(self, delay: float) -> None:
        await self.clock.sleep(delay)
        self._timer = None
        self._feed(Event.START)

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer is not asyncio.current_task():
            self._timer.cancel()
        self._timer = None

    # ------------------------------------------------------------ stop / kill

    def signal_group(self, sig: int) -> None:
        if self.proc is not None:
            self.proc.signal_group(sig)

    def _terminate(self, grace: float) -> None:
        self.liveness.disarm()  # we asked it to go: its silence is no longer a fault
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
        self._feed(Event.STOP, grace=grace)
        await self.exited_event.wait()  # set already when no process was running

    def kill(self, reason: str) -> None:
        """Take the child down for a fault (``heartbeat``, ``stalled``): it comes back through the restart policy."""
        log.warning("killing %s: %s", self.name, reason)
        self._feed(Event.KILL, reason=reason)

    def restart(self) -> None:
        """The operator's restart: a live child is taken down and started again at once (no backoff, no crash
        counted), one that is not running starts now. Two inputs: KILL (ignored with nothing to kill), then
        START (ignored while the child is on its way down: the exit's RESTART action starts it)."""
        log.info("restarting %s", self.name)
        self._feed(Event.KILL, reason="restart", counts_as_crash=False)
        self._feed(Event.START, reason=OPERATOR)

    def force(self) -> None:
        """Second SIGTERM/SIGINT: SIGKILL now."""
        self.signal_group(signal.SIGKILL)

    # ------------------------------------------------------------ stats

    def stats(self) -> dict[str, float | int | None]:
        """cpu, memory, fds and threads of the live process, as it measured itself in its last heartbeat.

        Not read from ``/proc/<pid>``: the service and the bridge are
        non-dumpable (:func:`clankie.child.make_undumpable`), so theirs is
        closed to a supervisor without ``CAP_SYS_PTRACE``. None until it beats.
        """
        beat = self.last_heartbeat
        sample = beat.process if beat is not None and self.pid is not None else None
        if sample is None:
            return {"cpu_percent": None, "rss_bytes": None, "num_fds": None, "threads": None}
        return {"cpu_percent": sample.cpu_percent, "rss_bytes": sample.rss_bytes, "num_fds": sample.num_fds,
                "threads": sample.threads}


def exit_from_waitid(result: os.waitid_result) -> Exit:
    """Turn a ``waitid`` result into an :class:`Exit` (``at`` is filled in by the caller)."""
    if result.si_code == os.CLD_EXITED:
        return Exit(code=result.si_status, signal=None, at=0.0)
    return Exit(code=None, signal=result.si_status, at=0.0, core=result.si_code == os.CLD_DUMPED)

