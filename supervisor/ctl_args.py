"""``clankiectl``'s command line: the parser, and the request record each command sends.

The record is built (and so validated) before dialling the supervisor, so an
argument the wire refuses is a usage error (exit 2) naming the argument, never
its value.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pydantic import ValidationError

from clankie.protocol import AbortRun, BudgetRequest, ChildTarget, LanesRequest, LogsRequest, Record, SayRequest
from clankie.version import describe
from supervisor.treestate import STOP_BUDGET

SAY_WAIT = 600.0
"""Default seconds ``say`` waits for the turn (the supervisor gives the service as long)."""

ARGUMENT_NAMES = {"name": "NAME", "room": "ROOM", "text": "TEXT", "lines": "-n/--lines", "lane": "LANE", "key": "KEY",
                  "tokens": "--tokens", "usd": "--usd", "hash": "--hash", "unlimited": "--unlimited"}
"""Record field -> the clankiectl argument it comes from (for bad-argument messages)."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clankiectl", description="Control a running Clankie supervisor.")
    p.add_argument(
        "--socket", type=Path,
        help="control socket (default: <runtime dir>/control.sock, else the unit's /run/clankie/control.sock)",
    )
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the supervisor (default 10)")
    p.add_argument("--version", action="version", version=describe(), help="the version and source revision, then exit")
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
    ln.add_argument("--limit", type=int, default=None, metavar="N",
                    help="show the first N lanes (live ones first; the service sends at most CLANKIE_LANES_LIST_MAX)")
    ln.add_argument("--hash", default=None, metavar="HASH",
                    help="only the lane(s) whose hash starts with HASH (4-16 hex digits: journald's LANE=, a trace's "
                         "gen_ai.conversation.id), searched among every lane")
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
    bu = sub.add_parser("budget", help="today's budgets; raise one for the rest of the day, or reset what a key spent")
    bu.add_argument("action", nargs="?", choices=("show", "raise", "reset"), default="show")
    bu.add_argument("key", nargs="?", default="tree", help="tree (default), room:<guild|dm>/<channel> or user:<id>")
    bu.add_argument("--tokens", type=int, default=None, help="raise: the token limit for the rest of the day")
    bu.add_argument("--usd", type=float, default=None, help="raise: the dollar limit for the rest of the day")
    bu.add_argument("--unlimited", action="store_true", help="raise: no limit at all for the rest of the day")
    bu.add_argument("--json", action="store_true")
    dr = sub.add_parser("doctor", help="prove every picture-writing host and the bridge agree on the attachment root")
    dr.add_argument("--json", action="store_true")
    sub.add_parser("shutdown", help="stop every child and the supervisor")
    return p


def bounded(args: argparse.Namespace) -> float | None:
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
    if cmd == "budget":
        return BudgetRequest(action=args.action, key=args.key, tokens=args.tokens, usd=args.usd, unlimited=args.unlimited)
    if cmd == "logs":
        return LogsRequest(name=args.name, lines=max(0, args.lines))
    if cmd == "lanes":
        return LanesRequest(hash=args.hash.lower() if args.hash is not None else None)
    return None


def bad_arguments(exc: ValidationError) -> str:
    """Which clankiectl arguments a record refused, and why (never the values)."""
    parts = []
    for err in exc.errors()[:5]:
        field = str(err["loc"][0]) if err["loc"] else "?"
        parts.append(f"{ARGUMENT_NAMES.get(field, field)}: {err['msg']}")
    return "; ".join(parts)


