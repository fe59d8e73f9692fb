"""What ``clankiectl`` prints: the human renderings of the supervisor's replies.

Functions of a reply (and ``now`` where an age is shown), with no I/O of their own; not a pure core, since
the attachment-root agreement comes from :mod:`supervisor.doctor`. The ``--json``
shapes are the records' own dumps and are not built here.
"""

from __future__ import annotations

from typing import Any, assert_never

from clankie.journald import lane_hash
from clankie.protocol import (
    BudgetInfo,
    BudgetReply,
    ChildStatus,
    DoctorReply,
    ExitInfo,
    LaneInfo,
    StatusReply,
    Tokens,
    TurnAbsorbed,
    TurnFailed,
    TurnResult,
    TurnSettled,
    TurnSilent,
)
from supervisor.doctor import agreement


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1048576:.1f}M"


def format_status(reply: StatusReply, now: float) -> str:
    sup = reply.supervisor
    head = f"supervisor pid {sup.pid} {sup.state} up {age(sup.uptime_s)}" + (" ready" if sup.ready else "")
    if sup.stderr_dropped:
        head += f"; stderr too slow, {sup.stderr_dropped} lines dropped (the log files have them)"
    lines = [head]
    if sup.store:  # the shards' leases and epochs are on the bridge's row
        lines.append(f"store: {sup.store}")
    if sup.disk:
        lines.append(f"!! disk: {sup.disk}")
    lines.append(f"{'NAME':<9}{'STATE':<10}{'PID':>8} {'UPTIME':>8} {'RESTARTS':>8} {'CPU%':>6} {'RSS':>8} {'FDS':>4}  DETAIL")
    for c in reply.children:
        cpu = "-" if c.cpu_percent is None else f"{c.cpu_percent:.1f}"
        detail = c.detail
        if c.state in ("backoff", "fatal") and c.next_start_at is not None:
            detail = f"{c.reason}; next start in {age(max(0.0, c.next_start_at - now))}"
            if c.waiting:
                detail += f" ({c.waiting})"
        elif c.state == "fatal":
            detail = c.reason
        if c.last_exit is not None and c.state != "running":
            detail = f"{detail} [last: {c.ended}]" if detail else f"[last: {c.ended}]"
        elif c.last_exit is not None and c.restarts:  # running again: why the last one went, as systemctl shows it
            last = f"[last exit: {exit_fields(c.last_exit)}; {c.restart_reason or 'restart'}, {age(max(0.0, now - c.last_exit.at))} ago]"
            detail = f"{detail} {last}" if detail else last
        if c.spare and c.spare != "off":
            detail = f"{detail} [spare: {c.spare}]"
        if c.log_error:
            detail = f"{detail} [log: {c.log_error}]" if detail else f"[log: {c.log_error}]"
        lines.append(
            f"{c.name:<9}{c.state:<10}{c.pid or '-':>8} {age(c.uptime_s):>8} {c.restarts:>8} {cpu:>6} "
            f"{mib(c.rss_bytes):>8} {c.num_fds if c.num_fds is not None else '-':>4}  {detail}"
        )
    if reply.tokens_today is not None:
        lines.append(f"spent today ({reply.tokens_day} UTC): {format_tokens(reply.tokens_today)}")
    return "\n".join(lines)


def exit_fields(ex: ExitInfo) -> str:
    """How a process ended in ``systemctl status``'s words: ``code=exited, status=1``, ``code=killed, signal=KILL``,
    ``code=dumped, signal=SEGV``."""
    if ex.signal is not None:
        name = ex.signal.removeprefix("SIG")
        return f"code={'dumped' if ex.core else 'killed'}, signal={name}"
    if ex.code is None:
        return "code=spawn_error"
    return f"code=exited, status={ex.code}"


def format_tokens(tokens: Tokens | None) -> str:
    """``tokens in=… cache_read=… cache_write=… out=…`` (``tokens -`` when not known)."""
    if tokens is None:
        return "tokens -"
    return (f"tokens in={tokens.input} cache_read={tokens.cache_read} cache_write={tokens.cache_write} "
            f"out={tokens.output}")


def format_child_move(child: ChildStatus) -> str:
    """One child's line after ``start|stop|restart``: ``NAME: STATE [pid N]``."""
    return f"{child.name}: {child.state}" + (f" pid {child.pid}" if child.pid else "")


def format_lane(lane: LaneInfo) -> str:
    """One line of ``lanes``: its hash (journald's ``LANE=``, traces' conversation id), then a live lane's run, turns,
    spend, room budget and cache, or an on-disk lane's last activity."""
    if not lane.live:
        warmth = "warm" if lane.warm else "cold"
        return f"{lane_hash(lane.key)}  {lane.key}  {lane.state}  {warmth}  last_active={age(lane.last_active_age_s)}"
    line = (f"{lane_hash(lane.key)}  {lane.key}  {lane.state}  {'warm' if lane.warm else 'cold'}  run={lane.run_id or '-'}  "
            f"last_event={age(lane.last_event_age_s)}  turns={lane.turns}  {format_tokens(lane.tokens)}")
    if lane.budget_key is not None:
        line += f"  {lane.budget_key} today={lane.spent_today_tokens or 0} tok ${lane.spent_today_usd or 0.0:.4f}"
        line += f" left={_left(lane.budget_tokens_left, lane.budget_usd_left)}"
    share = "-" if lane.cache_read_share is None else f"{lane.cache_read_share:.0%}"
    return line + f"  cache_read={share} lifetime={lane.cache_lifetime or '-'}"


def _left(tokens: int | None, usd: float | None) -> str:
    parts = ([] if tokens is None else [f"{max(0, tokens)} tok"]) + ([] if usd is None else [f"${max(0.0, usd):.4f}"])
    return " ".join(parts) or "unlimited"


def format_budget(reply: BudgetReply) -> str:
    """What ``budget`` prints: each key's spend today, its limits and what is left."""
    lines = [reply.message] if reply.message else []
    lines.append(f"budgets for {reply.day} (UTC):")
    lines += [format_budget_row(b) for b in reply.budgets]
    return "\n".join(lines)


def format_budget_row(b: BudgetInfo) -> str:
    limit = " ".join(x for x in (f"{b.limit_tokens} tok" if b.limit_tokens else "",
                                 f"${b.limit_usd:.2f}" if b.limit_usd else "") if x) or "none"
    return (f"  {b.key}  spent={b.spent_tokens} tok ${b.spent_usd:.4f}  limit={limit}  "
            f"left={_left(b.tokens_left, b.usd_left)}")


def format_turn(res: TurnResult) -> str:
    """What ``say`` prints: the reply text, or the outcome in parentheses."""
    match res.kind:
        case TurnSettled(text=text):
            return text
        case TurnFailed(code=code):
            return f"(failed: {code})"
        case TurnSilent() | TurnAbsorbed():
            return f"({res.outcome})"
        case unreachable:
            assert_never(unreachable)


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


PAIR_FIXES = {
    "writer_not_running": "clankiectl start {writer}",
    "reader_not_running": "clankiectl start {reader}",
    "attachment_root_mismatch": "give every child the same CLANKIE_DISCORD_ATTACHMENT_ROOT and CLANKIE_STATE",
    "artifact_root_unavailable": "make the attachment root exist and writable by the tree's user",
    "artifact_write_failed": "make the attachment root writable by the tree's user, with space free",
}
"""The fix ``doctor`` prints for a failed picture pair, by code (others: the operations page's section)."""


def format_doctor(reply: DoctorReply) -> str:
    """One line per health check and picture pair, ``ok``/``warn``/``fail``, the fix under each that is not ok."""
    lines = []
    for h in reply.health:
        lines.append(f"{h.status:<6}{h.name:<18}{h.detail}")
        if h.fix:
            lines.append(f"{'':<6}{'':<18}fix: {h.fix}")
    for c in reply.checks:
        pair = f"{c.writer} -> {c.reader}"
        if c.ok:
            lines.append(f"{'ok':<6}{'pictures':<18}{pair}: {c.ref}")
            continue
        fix = PAIR_FIXES.get(c.code or "", "docs/operations.md, 'Pictures that do not attach'")
        lines.append(f"{'fail':<6}{'pictures':<18}{pair}: {c.code}")
        lines.append(f"{'':<24}{c.writer} root: {c.writer_root or '-'}; {c.reader} root: {c.reader_root or '-'}")
        lines.append(f"{'':<24}fix: {fix.format(writer=c.writer, reader=c.reader)}")
    counts = {s: sum(1 for h in reply.health if h.status == s) for s in ("ok", "warn", "fail")}
    passed = sum(1 for c in reply.checks if c.ok)
    lines.append(f"doctor: {counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail; "
                 f"{passed}/{len(reply.checks)} picture pairs pass")
    return "\n".join(lines)
