"""``control.sock``: what ``clankiectl`` talks to (role ``supervisor-control``).

Status comes from the tree and the children's heartbeats (each measures
its own memory, fds and cpu); start/stop/restart drive the
lifecycle; ``lanes``, ``abort``, ``say`` and ``budget`` are proxied to the service over
its link; ``logs`` reads the child's log file (``wait`` > 0 long-polls for
``-f``); ``doctor`` runs the attachment probe (:mod:`supervisor.doctor`). Errors carry stable codes: ``no_such_child``, ``not_running``,
``service_unavailable``, ``shutting_down``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import os
from pathlib import Path

from clankie import ipc
from clankie.errors import ChannelBroken, ChannelClosed, RemoteError, RequestTimeout
from clankie.protocol import (
    AbortRun,
    BudgetRequest,
    Caller,
    ChildStatus,
    ChildTarget,
    Code,
    ControlReply,
    DoctorReply,
    Empty,
    ExitInfo,
    LanesRequest,
    LogsReply,
    LogsRequest,
    Record,
    SayRequest,
    StatusReply,
    SupervisorInfo,
)
from clankie.router import Router
from clankie.settings import Settings
from clankie.waits import within
from supervisor import selflog
from supervisor.doctor import run_doctor
from supervisor.external import external_status
from supervisor.lifecycle import OPERATOR, State
from supervisor.output import REPLY_LIMIT, read_from, read_tail
from supervisor.peers import outside_the_tree
from supervisor.process import Child
from supervisor.spend_today import SpendToday
from supervisor.tree import Tree

log = logging.getLogger(__name__)

ROLE = "supervisor-control"
PROXY_TIMEOUT = 10.0
SAY_TIMEOUT = 600.0



def _count(value: float | int | None) -> int | None:
    """A process statistic that is a count (reported as ints; the map they travel in is mixed)."""
    return None if value is None else int(value)

def _signal_name(sig: int | None) -> str | None:
    if sig is None:
        return None
    import signal

    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def child_status(tree: Tree, child: Child) -> ChildStatus:
    life = child.life
    mono = tree.clock.monotonic()
    wall = tree.clock.wall()
    ex = life.last_exit
    last_exit = (
        ExitInfo(code=ex.code, signal=_signal_name(ex.signal), at=ex.at, core=ex.core) if ex is not None else None
    )
    next_start = wall + (life.next_start_at - mono) if life.next_start_at is not None else None
    stats = child.stats()
    beat = child.liveness.last_beat
    detail = child.detail if life.state is State.RUNNING else (life.reason or child.detail)
    if life.state is State.BACKOFF and life.waiting:
        detail = f"{detail}; {life.waiting}"
    spare, spare_pid = child.spare.status()
    return ChildStatus(
        name=child.name,
        state=life.state.value,
        pid=child.pid,
        uptime_s=life.uptime(mono),
        restarts=life.restarts,
        last_exit=last_exit,
        next_start_at=next_start,
        cpu_percent=stats["cpu_percent"],
        rss_bytes=_count(stats["rss_bytes"]),
        num_fds=_count(stats["num_fds"]),
        threads=_count(stats["threads"]),
        detail=detail[:200],
        reason=life.reason[:300],
        ended=life.ended if ex is not None else "",
        ready=life.state is State.RUNNING,
        last_heartbeat_age_s=(mono - beat) if beat is not None and child.alive else None,
        attachment_root=child.attachment_root,
        spare=spare[:200],
        waiting=life.waiting if life.state is State.BACKOFF else "",
        spare_pid=spare_pid,
        log_error=_log_error(child),
        restart_reason=life.restart_reason,
        restarts_by=dict(life.restarts_by),
    )


def _log_error(child: Child) -> str:
    log_file = child.log
    if not log_file.problem:
        return ""
    return f"{log_file.problem}; {log_file.lost_bytes} bytes not written to {log_file.path.name}"


def status(tree: Tree) -> StatusReply:
    return StatusReply(
        supervisor=SupervisorInfo(
            pid=os.getpid(),
            uptime_s=tree.uptime(),
            state=tree.state.value,
            ready=tree.ready_sent,
            stderr_dropped=tree.stderr.dropped if tree.stderr is not None else 0,
            disk=tree.disk_problem(),
            store=store_line(tree.settings),
        ),
        children=tuple(child_status(tree, tree.children[n]) for n in tree.order),
    )


def store_line(settings: Settings) -> str:
    """The status's store: "" for files, else ``postgres (<parameters>)``, never the password."""
    if settings.store != "postgres" or settings.postgres_dsn is None:
        return ""
    from clankie.settings_store import describe_dsn

    return f"postgres ({describe_dsn(settings.postgres_dsn.get_secret_value())})"[:300]


CONTROL_MAX_INFLIGHT = 8
"""Calls one control connection may have running (clankiectl makes one at a time); past it ``too_many_requests``."""


def control_limits(settings: Settings) -> ipc.Limits:
    """control.sock's admission: short hello, idle timeout, per-pid cap, root's reserve, idle eviction, in-flight cap."""
    return ipc.Limits.capped(
        settings.control_max_connections,
        per_pid=settings.control_per_pid_connections,
        hello_timeout=settings.ipc_hello_seconds,
        idle_timeout=settings.control_idle_seconds,
        evict_idle=True,
        max_inflight=CONTROL_MAX_INFLIGHT,
    )


def _audit(conn: ipc.Connection, action: str, target: str) -> Caller:
    """One log line for an operator's action, naming the caller's pid and uid (``SO_PEERCRED`` at accept): what the
    service then does with it carries the same :class:`Caller` into its evidence and ledger."""
    pid, uid = conn.caller if conn.caller is not None else (0, 0)
    log.info("control: %s %s by pid %d uid %d", action, target[:200], pid, uid)
    return Caller(pid=pid, uid=uid)


class Control:
    """The control-socket handler, bound to one tree."""

    def __init__(self, tree: Tree, *, partial_frame_timeout: float = 10.0) -> None:
        self.tree = tree
        self.server: ipc.Server | None = None
        self._partial_frame_timeout = partial_frame_timeout
        self.spend = SpendToday(tree.settings.state_dir / "captain")  # each call reads what was written since the last

    async def start(self, path: Path) -> None:
        self.server = await ipc.serve(
            path,
            ROLE,
            self.handle,
            max_frame=self.tree.settings.max_frame_bytes,
            partial_frame_timeout=self._partial_frame_timeout,
            limits=control_limits(self.tree.settings),
            admit_socket=outside_the_tree,  # root or our uid (the uid rule), and only a process proven outside the tree
        )

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()

    def _targets(self, name: str) -> list[Child]:
        if name == "all":
            return [self.tree.children[n] for n in self.tree.order]
        child = self.tree.child(name)
        if child is None and name == "browser" and self.tree.settings.external_browser:
            raise RemoteError(Code.NO_SUCH_CHILD, "the browser runs in its own unit (CLANKIE_BROWSER_HOST=external): "
                                                  "use systemctl on clankie-browser.service")
        if child is None:
            raise RemoteError(Code.NO_SUCH_CHILD, f"no child named {name!r}; have {', '.join(self.tree.order)}")
        return [child]

    def _service(self) -> Child:
        for child in self.tree.children.values():
            if child.spec.proxy:
                if child.link is None or child.link.closed:
                    raise RemoteError(Code.SERVICE_UNAVAILABLE, f"{child.name} is {child.life.state.value}, not linked")
                return child
        raise RemoteError(Code.SERVICE_UNAVAILABLE, "no service child in this tree")

    async def _proxy(self, method: str, params: Record, timeout: float) -> Record:
        child = self._service()
        assert child.link is not None
        try:
            return await child.link.request(method, params, timeout=timeout)
        except (ChannelBroken, ChannelClosed) as exc:
            raise RemoteError(Code.SERVICE_UNAVAILABLE, f"{child.name} went away: {exc}") from None
        except RequestTimeout:
            raise RemoteError(Code.SERVICE_TIMEOUT, f"{child.name} did not answer {method} in {timeout:g}s") from None

    @functools.cached_property
    def handle(self) -> Router:
        """One handler per control method, checked against the method table."""
        return Router(ROLE, {
            "status": self._status,
            "start": functools.partial(self._control, "start"),
            "stop": functools.partial(self._control, "stop"),
            "restart": functools.partial(self._control, "restart"),
            "shutdown": self._shutdown,
            "logs": self._logs,
            "lanes": self._lanes,
            "abort": self._abort,
            "say": self._say,
            "budget": self._budget,
            "doctor": self._doctor,
        })

    async def _status(self, params: Empty) -> StatusReply:
        tree = self.tree
        day = dt.datetime.fromtimestamp(tree.clock.wall(), dt.UTC).date().isoformat()
        spent = await asyncio.to_thread(self.spend.of_day, day)
        reply = status(tree).model_copy(update={"tokens_today": spent, "tokens_day": day})
        if tree.settings.external_browser:  # not ours to run; say whether its socket answers
            browser = await external_status(tree.settings.browser_socket)
            reply = reply.model_copy(update={"children": (browser, *reply.children)})
        return reply

    async def _control(self, method: str, conn: ipc.Connection, params: ChildTarget) -> ControlReply:
        _audit(conn, method, params.name)
        tree = self.tree
        if tree.stopping:
            raise RemoteError(Code.SHUTTING_DOWN, "the supervisor is shutting down")
        targets = self._targets(params.name)
        if method == "start":
            for child in targets:
                child.start(OPERATOR)
        elif method == "stop":  # like shutdown: the whole stop fits in the stop budget
            deadline = tree.clock.monotonic() + tree.stop_budget
            for child in reversed(targets):
                remaining = max(0.1, deadline - tree.clock.monotonic())
                await child.stop(min(child.spec.stop_timeout, remaining))
        else:
            for child in targets:
                child.restart()
            await asyncio.gather(*(self._wait_up(c) for c in targets))
        children = tuple(child_status(tree, c) for c in targets)
        return ControlReply(ok=True, message=f"{method} {params.name}", children=children)

    def _shutdown(self, conn: ipc.Connection, params: Empty) -> ControlReply:
        _audit(conn, "shutdown", "")
        asyncio.get_running_loop().call_soon(self.tree.request_stop)
        return ControlReply(ok=True, message="shutting down")

    async def _lanes(self, params: LanesRequest) -> Record | None:
        return await self._proxy("lanes", params, PROXY_TIMEOUT)

    async def _abort(self, conn: ipc.Connection, params: AbortRun) -> Record | None:
        caller = _audit(conn, "abort", params.lane)
        return await self._proxy("abort_run", params.model_copy(update={"reason": "operator", "caller": caller}),
                                 PROXY_TIMEOUT)

    async def _say(self, conn: ipc.Connection, params: SayRequest) -> Record | None:
        caller = _audit(conn, "say", params.room)  # the room, never the text
        return await self._proxy("say", params.model_copy(update={"caller": caller}), SAY_TIMEOUT)

    async def _budget(self, conn: ipc.Connection, params: BudgetRequest) -> Record | None:
        caller = _audit(conn, f"budget {params.action}", params.key) if params.action != "show" else None
        return await self._proxy("budget", params.model_copy(update={"caller": caller}), PROXY_TIMEOUT)

    async def _doctor(self, conn: ipc.Connection, params: Empty) -> DoctorReply:
        _audit(conn, "doctor", "")
        if self.tree.stopping:
            raise RemoteError(Code.SHUTTING_DOWN, "the supervisor is shutting down")
        return await run_doctor(self.tree.children, self.tree.settings)

    async def _wait_up(self, child: Child) -> None:
        """A restart answers once the old process is gone (the new one is spawned at that moment)."""
        if child.pid is None or child.exited_event.is_set():
            return
        try:
            await within(child.exited_event.wait(), child.spec.stop_timeout + 2.0)
        except TimeoutError:
            log.warning("%s did not exit during restart", child.name)

    def _log_of(self, name: str) -> Path:
        """The file ``logs NAME`` reads: a child's captured output, or the supervisor's own log."""
        if name == "all":
            raise RemoteError(Code.NO_SUCH_CHILD, "logs needs one child name (or supervisor)")
        if name == selflog.NAME and self.tree.child(name) is None:
            if self.tree.native_journal:
                raise RemoteError(Code.NO_LOG_FILE, "under systemd the supervisor logs to the journal: "
                                                    "journalctl -u clankie (add -p warning for crashes only)")
            path = selflog.log_path(self.tree.settings.state_dir)
            if not path.exists():
                raise RemoteError(Code.NO_LOG_FILE, "the supervisor keeps no log file here (it writes only to its stderr)")
            return path
        return self._targets(name)[0].log_path

    async def _logs(self, req: LogsRequest) -> LogsReply:
        path = self._log_of(req.name)
        limit = min(REPLY_LIMIT, self.tree.settings.max_frame_bytes // 2)  # a reply must fit one frame
        if req.offset is None:
            data, offset = read_tail(path, req.lines, limit)
            return LogsReply(data=data, offset=offset)
        loop = asyncio.get_running_loop()
        end = loop.time() + req.wait
        while True:
            data, offset = read_from(path, req.offset, limit)
            if data or loop.time() >= end:
                return LogsReply(data=data, offset=offset)
            await asyncio.sleep(0.1)


