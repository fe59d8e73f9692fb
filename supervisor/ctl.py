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
from typing import Any, TypeVar

from pydantic import ValidationError

from clankie import ipc
from clankie.directories import runtime_dir
from clankie.errors import (
    ChannelBroken,
    ChannelClosed,
    ConfigError,
    RemoteError,
    RemoteProtocolError,
    RequestTimeout,
)
from clankie.journald import lane_hash
from clankie.paths import SYSTEM_RUNTIME_DIR, process_environment, socket_path
from clankie.protocol import (
    AbortReply,
    BudgetReply,
    ControlReply,
    DoctorReply,
    Empty,
    LanesReply,
    LogsReply,
    LogsRequest,
    Record,
    StatusReply,
    TurnOutcome,
    TurnResult,
)
from supervisor.ctl_args import bad_arguments, bounded, params_of, parser
from supervisor.ctl_render import (
    format_budget,
    format_child_move,
    format_disagreement,
    format_doctor,
    format_lane,
    format_status,
    format_turn,
    roots_of,
)

EX_OK, EX_FAILED, EX_USAGE, EX_UNAVAILABLE = 0, 1, 2, 69
CLIENT_ROLE = "clankiectl"


class Unreachable(Exception):
    """The supervisor is not running or not answering."""


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


R = TypeVar("R", bound=Record)


async def _call(conn: ipc.Connection, method: str, params: Record, timeout: float | None, expect: type[R]) -> R:
    try:
        return await conn.request(method, params, expect=expect, timeout=timeout)
    except (ChannelBroken, ChannelClosed) as exc:
        raise Unreachable(f"the supervisor went away: {exc}") from None
    except RequestTimeout:
        raise Unreachable(f"the supervisor did not answer {method} within the timeout") from None


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
        ctl = await _call(conn, cmd, args.params, bounded(args), ControlReply)
        if args.json:
            print(json.dumps(_dump(ctl)), file=out)
        else:
            for c in ctl.children:
                print(format_child_move(c), file=out)
        return EX_OK if ctl.ok else EX_FAILED
    if cmd == "shutdown":
        ctl = await _call(conn, "shutdown", Empty(), timeout, ControlReply)
        print(ctl.message, file=out)
        return EX_OK
    if cmd == "lanes":
        lanes = await _call(conn, "lanes", args.params, timeout, LanesReply)
        if args.limit is not None:
            lanes = LanesReply(lanes=lanes.lanes[: max(0, args.limit)])
        if args.json:  # each lane with its hash, as journald's LANE= and traces carry it
            rows = [{**_dump(lane), "hash": lane_hash(lane.key)} for lane in lanes.lanes]
            print(json.dumps({"lanes": rows}), file=out)
        elif not lanes.lanes and args.hash is not None:
            print(f"no lane's hash starts with {args.hash}", file=out)
            return EX_FAILED
        elif not lanes.lanes:
            print("no lanes yet (a lane opens with its room's first turn)", file=out)
        else:
            for lane in lanes.lanes:
                print(format_lane(lane), file=out)
        return EX_OK
    if cmd == "abort":
        ab = await _call(conn, "abort", args.params, timeout, AbortReply)
        print(json.dumps(_dump(ab)) if args.json else ("aborted" if ab.aborted else "no live run"), file=out)
        return EX_OK if ab.aborted else EX_FAILED
    if cmd == "say":
        res = await _call(conn, "say", args.params, bounded(args), TurnResult)
        if args.json:
            print(json.dumps(_dump(res)), file=out)
        else:
            print(format_turn(res), file=out)
        return EX_FAILED if res.outcome is TurnOutcome.FAILED else EX_OK
    if cmd == "budget":
        budget = await _call(conn, "budget", args.params, timeout, BudgetReply)
        print(json.dumps(_dump(budget)) if args.json else format_budget(budget), file=out)
        return EX_OK
    if cmd == "logs":
        return await _logs(conn, args)
    if cmd == "doctor":
        return await _doctor(conn, args)
    raise AssertionError(cmd)


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
        args = parser().parse_args(argv)
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
