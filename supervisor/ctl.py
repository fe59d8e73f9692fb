"""``clankiectl``: the operator's CLI over ``control.sock``.

Exit codes (stable): 0 ok, 1 the operation failed (the supervisor said no,
or a ``say`` turn failed), 2 usage error (including an argument the wire
records refuse, such as an empty ``say`` text), 69 the supervisor is not
reachable (not running, or not answering in time).

Every wait is bounded: ``--timeout`` covers connecting and the quick
commands; ``start|stop|restart`` and ``say`` also wait ``--wait`` seconds for
the operation itself (defaults: the supervisor's 25 s stop budget, and 600 s
for a turn; 0 waits forever). Read commands take
``--json`` and print exactly the shapes of ARCHITECTURE §9 (extra keys may
appear; none of those listed change).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, assert_never

from pydantic import ValidationError

from clankie import ipc
from clankie.errors import (
    ChannelBroken,
    ChannelClosed,
    ConfigError,
    RemoteError,
    RemoteProtocolError,
    RequestTimeout,
)
from clankie.paths import SYSTEM_RUNTIME_DIR, process_environment, socket_path
from clankie.protocol import (
    AbortReply,
    AbortRun,
    ChildTarget,
    ControlReply,
    DoctorReply,
    Empty,
    LanesReply,
    LogsReply,
    LogsRequest,
    Record,
    SayRequest,
    StatusReply,
    Tokens,
    TurnAbsorbed,
    TurnFailed,
    TurnResult,
    TurnSettled,
    TurnSilent,
)
from clankie.settings import runtime_dir
from supervisor.doctor import agreement
from supervisor.tree import STOP_BUDGET

EX_OK, EX_FAILED, EX_USAGE, EX_UNAVAILABLE = 0, 1, 2, 69
CLIENT_ROLE = "clankiectl"
SAY_WAIT = 600.0
"""Default seconds ``say`` waits for the turn (the supervisor gives the service as long)."""

ARGUMENT_NAMES = {"name": "NAME", "room": "ROOM", "text": "TEXT", "lines": "-n/--lines", "lane": "LANE"}
"""Record field -> the clankiectl argument it comes from (for bad-argument messages)."""


class Unreachable(Exception):
    """The supervisor is not running or not answering."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clankiectl", description="Control a running Clankie supervisor.")
    p.add_argument(
        "--socket", type=Path,
        help="control socket (default: <runtime dir>/control.sock, else the unit's /run/clankie/control.sock)",
    )
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the supervisor (default 10)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    st = sub.add_parser("status", help="state of every child")
    st.add_argument("name", nargs="?", help="only this child")
    st.add_argument("--json", action="store_true")
    for verb in ("start", "stop", "restart"):
        c = sub.add_parser(verb, help=f"{verb} a child, or all")
        c.add_argument("name", help="service, bridge, browser, tldraw or all")
        c.add_argument("--json", action="store_true")
        c.add_argument(
            "--wait", type=float, default=STOP_BUDGET, metavar="SECONDS",
            help=f"seconds to wait for the children, on top of --timeout (default {STOP_BUDGET:g}: the "
                 "supervisor's stop budget; 0 waits forever)",
        )
    ln = sub.add_parser("lanes", help="the service's lanes")
    ln.add_argument("--json", action="store_true")
    ab = sub.add_parser("abort", help="abort the live run of a lane")
    ab.add_argument("lane")
    ab.add_argument("--json", action="store_true")
    lg = sub.add_parser("logs", help="a child's captured output")
    lg.add_argument("name")
    lg.add_argument("-n", "--lines", type=int, default=50)
    lg.add_argument("-f", "--follow", action="store_true")
    say = sub.add_parser("say", help="an operator turn through the service, without Discord")
    say.add_argument("room")
    say.add_argument("text")
    say.add_argument("--json", action="store_true")
    say.add_argument(
        "--wait", type=float, default=SAY_WAIT, metavar="SECONDS",
        help=f"seconds to wait for the turn, on top of --timeout (default {SAY_WAIT:g}; 0 waits forever)",
    )
    dr = sub.add_parser("doctor", help="prove every picture-writing host and the bridge agree on the attachment root")
    dr.add_argument("--json", action="store_true")
    sub.add_parser("shutdown", help="stop every child and the supervisor")
    return p


async def _connect(path: Path, timeout: float) -> ipc.Connection:
    if not path.exists():  # noqa: ASYNC240 (one stat in the runtime dir before dialling)
        raise Unreachable(f"the supervisor is not running (no {path})")
    try:
        return await ipc.connect(path, CLIENT_ROLE, timeout=timeout)
    except (ChannelBroken, ChannelClosed, RequestTimeout, OSError) as exc:
        cause = exc.__cause__ or exc
        if isinstance(cause, ConnectionRefusedError):
            raise Unreachable(f"the supervisor is not running ({path} refuses connections)") from None
        if isinstance(exc, ChannelBroken) and not isinstance(cause, OSError):
            raise Unreachable(
                f"the supervisor closed the connection on {path} before answering "
                "(its connection limits refused this client: see its log)"
            ) from None
        raise Unreachable(f"the supervisor is not answering on {path}: {type(cause).__name__}") from None


def _bounded(args: argparse.Namespace) -> float | None:
    """How long a command with a ``--wait`` may take: ``--timeout`` + ``--wait``, or forever for ``--wait 0``."""
    return None if args.wait <= 0 else args.timeout + args.wait


def params_of(args: argparse.Namespace) -> Record | None:
    """The request record a command sends, built (and so validated) before connecting."""
    cmd = args.command
    if cmd in ("start", "stop", "restart"):
        return ChildTarget(name=args.name)
    if cmd == "abort":
        return AbortRun(lane=args.lane, reason="operator")
    if cmd == "say":
        return SayRequest(room=args.room, text=args.text)
    if cmd == "logs":
        return LogsRequest(name=args.name, lines=max(0, args.lines))
    return None


def bad_arguments(exc: ValidationError) -> str:
    """Which clankiectl arguments a record refused, and why (never the values)."""
    parts = []
    for err in exc.errors()[:5]:
        field = str(err["loc"][0]) if err["loc"] else "?"
        parts.append(f"{ARGUMENT_NAMES.get(field, field)}: {err['msg']}")
    return "; ".join(parts)


R = TypeVar("R", bound=Record)


async def _call(conn: ipc.Connection, method: str, params: Record, timeout: float | None, expect: type[R]) -> R:
    try:
        return await conn.request(method, params, expect=expect, timeout=timeout)
    except (ChannelBroken, ChannelClosed) as exc:
        raise Unreachable(f"the supervisor went away: {exc}") from None
    except RequestTimeout:
        raise Unreachable(f"the supervisor did not answer {method} within the timeout") from None


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1048576:.1f}M"


def format_status(reply: StatusReply, now: float) -> str:
    sup = reply.supervisor
    head = f"supervisor pid {sup.pid} {sup.state} up {_age(sup.uptime_s)}" + (" ready" if sup.ready else "")
    if sup.stderr_dropped:
        head += f"; stderr too slow, {sup.stderr_dropped} lines dropped (the log files have them)"
    lines = [head]
    if sup.disk:
        lines.append(f"!! disk: {sup.disk}")
    lines.append(f"{'NAME':<9}{'STATE':<10}{'PID':>8} {'UPTIME':>8} {'RESTARTS':>8} {'CPU%':>6} {'RSS':>8} {'FDS':>4}  DETAIL")
    for c in reply.children:
        cpu = "-" if c.cpu_percent is None else f"{c.cpu_percent:.1f}"
        detail = c.detail
        if c.state in ("backoff", "fatal") and c.next_start_at is not None:
            detail = f"{c.reason}; next start in {_age(max(0.0, c.next_start_at - now))}"
            if c.waiting:
                detail += f" ({c.waiting})"
        elif c.state == "fatal":
            detail = c.reason
        if c.last_exit is not None and c.state != "running":
            detail = f"{detail} [last: {c.ended}]" if detail else f"[last: {c.ended}]"
        if c.spare and c.spare != "off":
            detail = f"{detail} [spare: {c.spare}]"
        if c.log_error:
            detail = f"{detail} [log: {c.log_error}]" if detail else f"[log: {c.log_error}]"
        lines.append(
            f"{c.name:<9}{c.state:<10}{c.pid or '-':>8} {_age(c.uptime_s):>8} {c.restarts:>8} {cpu:>6} "
            f"{_mib(c.rss_bytes):>8} {c.num_fds if c.num_fds is not None else '-':>4}  {detail}"
        )
    if reply.tokens_today is not None:
        lines.append(f"spent today ({reply.tokens_day} UTC): {format_tokens(reply.tokens_today)}")
    return "\n".join(lines)


def format_tokens(tokens: Tokens | None) -> str:
    """``tokens in=… cache_read=… cache_write=… out=…`` (``tokens -`` when not known)."""
    if tokens is None:
        return "tokens -"
    return (f"tokens in={tokens.input} cache_read={tokens.cache_read} cache_write={tokens.cache_write} "
            f"out={tokens.output}")


def roots_of(reply: StatusReply) -> dict[str, Any]:
    """The top-level ``attachment_root`` key of ``status --json``: ``{"agree", "by_child"}``."""
    return agreement({c.name: c.attachment_root for c in reply.children})


def format_disagreement(roots: dict[str, Any]) -> str:
    """The loud warning printed when the children did not derive one attachment root."""
    lines = [
        "!! WARNING: ATTACHMENT ROOTS DISAGREE: pictures written by one child will not be found by another.",
        "!! Each child derived (from CLANKIE_DISCORD_ATTACHMENT_ROOT / CLANKIE_STATE):",
    ]
    lines += [f"!!   {name:<9}{root}" for name, root in roots["by_child"].items() if root is not None]
    lines.append("!! Fix the environment so every child gets the same root; `clankiectl doctor` checks each pair.")
    return "\n".join(lines)


def _dump(record: Record) -> Any:
    return record.model_dump(mode="json")


def default_socket(env: Mapping[str, str], system_dir: Path = SYSTEM_RUNTIME_DIR) -> Path:
    """The control socket clankiectl dials without ``--socket``.

    ``CLANKIE_RUNTIME_DIR`` or ``RUNTIME_DIRECTORY`` decide if set. Otherwise
    the per-user default (``$XDG_RUNTIME_DIR/clankie``, ``<state>/run``) if a
    supervisor is there, else the systemd unit's ``/run/clankie`` if one is
    there: an operator needs no variable for the shipped unit.
    """
    own = socket_path(runtime_dir(env), "control")
    if any((env.get(name) or "").strip() for name in ("CLANKIE_RUNTIME_DIR", "RUNTIME_DIRECTORY")) or own.exists():
        return own
    unit = system_dir / "control.sock"
    return unit if unit.exists() else own


async def _run(args: argparse.Namespace) -> int:
    path = args.socket or default_socket(process_environment())
    conn = await _connect(path, args.timeout)
    try:
        return await _command(conn, args)
    finally:
        await conn.aclose()


async def _command(conn: ipc.Connection, args: argparse.Namespace) -> int:
    cmd, out = args.command, sys.stdout
    timeout = args.timeout
    if cmd == "status":
        reply = await _call(conn, "status", Empty(), timeout, StatusReply)
        roots = roots_of(reply)  # over the whole tree, even when one child is shown
        if args.name:
            kept = tuple(c for c in reply.children if c.name == args.name)
            if not kept:
                print(f"clankiectl: no child named {args.name!r}", file=sys.stderr)
                return EX_FAILED
            reply = reply.model_copy(update={"children": kept})
        if args.json:
            print(json.dumps({**_dump(reply), "attachment_root": roots}), file=out)
        else:
            print(format_status(reply, time.time()), file=out)
            if not roots["agree"]:
                warning = format_disagreement(roots)
                print(warning, file=out)
                if not out.isatty():
                    print(warning, file=sys.stderr)
        return EX_OK
    if cmd in ("start", "stop", "restart"):
        ctl = await _call(conn, cmd, args.params, _bounded(args), ControlReply)
        if args.json:
            print(json.dumps(_dump(ctl)), file=out)
        else:
            for c in ctl.children:
                print(f"{c.name}: {c.state}" + (f" pid {c.pid}" if c.pid else ""), file=out)
        return EX_OK if ctl.ok else EX_FAILED
    if cmd == "shutdown":
        ctl = await _call(conn, "shutdown", Empty(), timeout, ControlReply)
        print(ctl.message, file=out)
        return EX_OK
    if cmd == "lanes":
        lanes = await _call(conn, "lanes", Empty(), timeout, LanesReply)
        if args.json:
            print(json.dumps(_dump(lanes)), file=out)
        elif not lanes.lanes:
            print("no lanes yet (a lane opens with its room's first turn)", file=out)
        else:
            for lane in lanes.lanes:
                age = _age(lane.last_event_age_s)
                print(f"{lane.key}  {lane.state}  {'warm' if lane.warm else 'cold'}  run={lane.run_id or '-'}  "
                      f"last_event={age}  turns={lane.turns}  {format_tokens(lane.tokens)}", file=out)
        return EX_OK
    if cmd == "abort":
        ab = await _call(conn, "abort", args.params, timeout, AbortReply)
        print(json.dumps(_dump(ab)) if args.json else ("aborted" if ab.aborted else "no live run"), file=out)
        return EX_OK if ab.aborted else EX_FAILED
    if cmd == "say":
        res = await _call(conn, "say", args.params, _bounded(args), TurnResult)
        if args.json:
            print(json.dumps(_dump(res)), file=out)
        else:
            match res.kind:
                case TurnSettled(text=text):
                    line = text
                case TurnFailed(code=code):
                    line = f"(failed: {code})"
                case TurnSilent() | TurnAbsorbed():
                    line = f"({res.outcome})"
                case unreachable:
                    assert_never(unreachable)
            print(line, file=out)
        return EX_FAILED if res.outcome == "failed" else EX_OK
    if cmd == "logs":
        return await _logs(conn, args)
    if cmd == "doctor":
        return await _doctor(conn, args)
    raise AssertionError(cmd)


def format_doctor(reply: DoctorReply) -> str:
    if not reply.checks:
        return "FAIL  no (host -> bridge) pair to check: the tree needs the bridge and at least one host"
    lines = []
    for c in reply.checks:
        pair = f"{c.writer} -> {c.reader}"
        if c.ok:
            lines.append(f"PASS  {pair:<20} {c.ref}")
        else:
            lines.append(f"FAIL  {pair:<20} {c.code}")
            lines.append(f"      {c.writer} root: {c.writer_root or '-'}")
            lines.append(f"      {c.reader} root: {c.reader_root or '-'}")
    passed = sum(1 for c in reply.checks if c.ok)
    lines.append(f"doctor: {passed}/{len(reply.checks)} pairs pass")
    return "\n".join(lines)


async def _doctor(conn: ipc.Connection, args: argparse.Namespace) -> int:
    reply = await _call(conn, "doctor", Empty(), args.timeout + 35.0, DoctorReply)
    print(json.dumps(_dump(reply)) if args.json else format_doctor(reply), file=sys.stdout)
    return EX_OK if reply.ok else EX_FAILED


async def _logs(conn: ipc.Connection, args: argparse.Namespace) -> int:
    buf = sys.stdout.buffer
    reply = await _call(conn, "logs", args.params, args.timeout, LogsReply)
    buf.write(reply.data)
    buf.flush()
    offset = reply.offset
    while args.follow:
        reply = await _call(conn, "logs", LogsRequest(name=args.name, offset=offset, wait=5.0), args.timeout + 5.0,
                            LogsReply)
        if reply.data:
            buf.write(reply.data)
            buf.flush()
        offset = reply.offset
    return EX_OK


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return EX_USAGE if exc.code not in (0, None) else EX_OK
    try:
        args.params = params_of(args)
    except ValidationError as exc:
        print(f"clankiectl: bad argument: {bad_arguments(exc)}", file=sys.stderr)
        return EX_USAGE
    try:
        return asyncio.run(_run(args))
    except Unreachable as exc:
        print(f"clankiectl: {exc}", file=sys.stderr)
        return EX_UNAVAILABLE
    except RemoteError as exc:
        print(f"clankiectl: {exc.code}: {exc.message}", file=sys.stderr)
        return EX_FAILED
    except ConfigError as exc:
        print(f"clankiectl: {exc}", file=sys.stderr)
        return EX_USAGE
    except RemoteProtocolError as exc:  # the supervisor's reply did not validate: its fault, not the operator's
        print(f"clankiectl: the supervisor sent a reply clankiectl cannot read: {exc}", file=sys.stderr)
        return EX_FAILED
    except KeyboardInterrupt:
        return EX_OK
    except BrokenPipeError:
        return EX_OK


if __name__ == "__main__":
    sys.exit(main())
