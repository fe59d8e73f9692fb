"""``clankiectl doctor``'s health check: each part of the tree as ok, warn or fail, with what to do about it.

The rules are pure functions of what the supervisor already holds (a child's
lifecycle and its last heartbeat's report, free bytes, the settings):
:func:`child_line`, :func:`discord_line`, :func:`budget_line`,
:func:`disk_line`, :func:`journal_line` (the reports are the bridge's and
the service's last heartbeats'). Three checks ask the world, each
bounded by :data:`PROBE_TIMEOUT`: :func:`metrics_line` scrapes the tree's own
endpoint, :func:`provider_line` asks the model provider's ``GET /v1/models``
with the key (200: the key works; 401/403: it is refused; no answer: the
provider is not reachable from here, and the key's validity is unknown), and
:func:`store_line` writes and removes a file in the state directory. No secret
and no content is ever in a line: codes, states, counts and paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from clankie.paths import LOW_SPACE, free_bytes
from clankie.protocol import HealthCheck
from clankie.settings_observability import parse_listen
from clankie.waits import within
from supervisor.lifecycle import State

if TYPE_CHECKING:
    from clankie.settings import Settings
    from supervisor.process import Child

Status = Literal["ok", "warn", "fail"]
PROBE_TIMEOUT = 5.0
"""Seconds one probe (the metrics scrape, the provider) may take."""
DISK_WARN_BYTES = 1 << 30
"""Below this many free bytes on the state filesystem, a warning (the full-disk state begins at LOW_SPACE)."""
BUDGET_WARN_SHARE = 0.2
"""A day budget with less than this share left is a warning (the 80 % mark of docs/spend.md)."""
JOURNAL_WARN_SHARE = 0.8
DEFAULT_PROVIDER = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"


def line(name: str, status: Status, detail: str, fix: str = "") -> HealthCheck:
    return HealthCheck(name=name[:64], status=status, detail=detail[:300], fix=fix[:300] if status != "ok" else "")


def child_line(name: str, state: State, reason: str, restarts: int, restart_reason: str) -> HealthCheck:
    """One child: running is ok, on its way up or back is a warning, stopped or fatal is a failure."""
    key = f"child:{name}"
    again = f", {restarts} restarts (last: {restart_reason})" if restarts else ""
    if state is State.RUNNING:
        return line(key, "ok", f"running{again}")
    if state in (State.STARTING, State.BACKOFF, State.EXITED, State.STOPPING):
        return line(key, "warn", f"{state.value} ({reason or 'starting'}){again}",
                    f"wait a moment, then clankiectl status {name}; clankiectl logs {name} says why it ended")
    if state is State.FATAL and reason.startswith("config_error"):
        return line(key, "fail", f"fatal: {reason}", f"fix that setting, then clankiectl start {name}")
    if state is State.FATAL:
        return line(key, "fail", f"fatal: {reason}", f"clankiectl logs {name} says why it crashed; then clankiectl start {name}")
    why = "by the operator" if reason in ("", "stopped") else f"({reason})"
    return line(key, "fail", f"{state.value} {why}", f"clankiectl start {name}")


def discord_line(report: Mapping[str, object] | None, present: bool = True) -> HealthCheck:
    """The bridge's Discord session, as its last heartbeat ``report`` said (None: the bridge is not running)."""
    if not present:
        return line("discord", "warn", "no bridge in this tree", "run the default tree (no --spec-file)")
    status = report.get("discord") if report is not None else None
    if not isinstance(status, str):
        return line("discord", "fail", "the bridge is not running: no Discord session", "see child:bridge above")
    if status == "connected":
        return line("discord", "ok", "gateway session connected (the token is accepted)")
    if status.startswith("disabled"):
        return line("discord", "warn", "local-only: no Discord token", "give the bridge its token: credential "
                    "discord_token (or DISCORD_TOKEN), then clankiectl restart bridge")
    return line("discord", "fail", f"gateway session {status[:80]}",
                "clankiectl logs bridge says why (a refused token is 'improper token'); check the network to Discord")


def _share(left: object, limit: object) -> float | None:
    if isinstance(left, int | float) and isinstance(limit, int | float) and limit > 0:
        return max(0.0, float(left)) / float(limit)
    return None


def budget_line(report: Mapping[str, object] | None) -> HealthCheck:
    """The tree's day budgets, from the service's last heartbeat report."""
    if report is None:
        return line("budget", "warn", "the service is not running: budgets unknown", "see child:service above")
    shares = {unit: _share(report.get(f"budget_{unit}_left"), report.get(f"budget_{unit}_limit"))
              for unit in ("tokens", "usd")}
    set_ = {unit: share for unit, share in shares.items() if share is not None}
    if not set_:
        return line("budget", "ok", "no day budget set for the tree (CLANKIE_BUDGET_DAY_TOKENS, CLANKIE_BUDGET_DAY_USD)")
    text = ", ".join(f"{unit} {share:.0%} left" for unit, share in set_.items())
    if any(share <= 0 for share in set_.values()):
        return line("budget", "fail", f"a day budget is spent ({text}): turns are refused until the UTC day ends",
                    "clankiectl budget raise tree --tokens N (or --usd N) for the rest of the day")
    if any(share < BUDGET_WARN_SHARE for share in set_.values()):
        return line("budget", "warn", f"over 80 % of a day budget is spent ({text})",
                    "clankiectl budget shows who spends it; raise it with clankiectl budget raise tree")
    return line("budget", "ok", text)


def disk_line(state_dir: Path, free: int | None) -> HealthCheck:
    """Free space on the state filesystem."""
    if free is None:
        return line("disk", "fail", f"cannot read the filesystem of {state_dir}", f"check that {state_dir} exists")
    mib = free // (1 << 20)
    if free < LOW_SPACE:
        return line("disk", "fail", f"the state filesystem is full ({free} bytes free): logs, receipts and turns fail",
                    f"free space on the filesystem of {state_dir}")
    if free < DISK_WARN_BYTES:
        return line("disk", "warn", f"{mib} MiB free on the state filesystem", f"free space on the filesystem of {state_dir}")
    return line("disk", "ok", f"{mib} MiB free on the state filesystem")


def journal_line(report: Mapping[str, object] | None, max_bytes: int) -> HealthCheck | None:
    """The bridge's journal against its bound, and a store error it reported (None without a bridge's report)."""
    if report is None:
        return None
    size, error = report.get("journal_bytes"), report.get("disk")
    if isinstance(error, str):
        return line("journal", "fail", f"the bridge's journal or receipts refuse writes ({error[:100]})",
                    "free space on the state filesystem; the bridge resumes by itself")
    if isinstance(size, int) and size >= JOURNAL_WARN_SHARE * max_bytes:
        return line("journal", "warn", f"the bridge's journal holds {size} of {max_bytes} bytes: near full, "
                    "messages that would wait are refused", "raise CLANKIE_DISCORD_JOURNAL_MAX_BYTES, or see why turns wait "
                    "(clankiectl status bridge)")
    return line("journal", "ok", f"the bridge's journal holds {size if isinstance(size, int) else '?'} bytes")


async def metrics_line(listen: str | None) -> HealthCheck:
    """The tree's metrics endpoint, scraped once as Prometheus would."""
    if listen is None:
        return line("metrics", "warn", "no metrics endpoint: nothing can alert on this tree",
                    "set CLANKIE_METRICS_LISTEN=127.0.0.1:9464 and load monitoring/alerts.yml into Prometheus")
    import aiohttp

    host, port = parse_listen(listen)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/metrics"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT)) as session, \
                session.get(url) as reply:
            body = await reply.text()
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return line("metrics", "fail", f"{url} does not answer ({type(exc).__name__})",
                    "check CLANKIE_METRICS_LISTEN and the supervisor's log (clankiectl logs supervisor)")
    if reply.status != 200 or "clankie_child_up" not in body:
        return line("metrics", "fail", f"{url} answers {reply.status} without the tree's series",
                    "another process holds that address: choose another CLANKIE_METRICS_LISTEN")
    return line("metrics", "ok", f"{url} answers ({body.count('# TYPE ')} families)")


async def provider_line(settings: Settings) -> HealthCheck:
    """The model provider: configured, reachable, and the key accepted (``GET /v1/models`` with it)."""
    if settings.demo:
        return line("provider", "ok", "demo mode: the built-in offline model answers, no key needed")
    key = settings.anthropic_api_key.get_secret_value().strip() if settings.anthropic_api_key is not None else ""
    if not key:
        return line("provider", "fail", "no Anthropic key: every turn fails captain_provider_unconfigured",
                    "give the service its key: credential anthropic_api_key (or ANTHROPIC_API_KEY), then "
                    "clankiectl restart service")
    import aiohttp

    base = (settings.anthropic_base_url or DEFAULT_PROVIDER).rstrip("/")
    headers = {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT), trust_env=True) as session, \
                session.get(f"{base}/v1/models", headers=headers) as reply:
            status = reply.status
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return line("provider", "warn", f"{base} is not reachable from here ({type(exc).__name__}): "
                    "the key's validity is unknown", "check the network (or the proxy variables) to the provider")
    if status in (401, 403):
        return line("provider", "fail", f"{base} refuses the key ({status})",
                    "replace the anthropic_api_key credential with a valid key, then clankiectl restart service")
    if status >= 500 or status == 429:
        return line("provider", "warn", f"{base} answers {status}: reachable, busy or failing",
                    "see the provider's status page; turns retry by themselves")
    if status != 200:
        return line("provider", "warn", f"{base} answers {status} to GET /v1/models", "check ANTHROPIC_BASE_URL")
    return line("provider", "ok", f"{base} reachable and the key is accepted")


def _write_probe(state_dir: Path) -> str | None:
    probe = state_dir / f".doctor-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, b"doctor\n")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return None


async def store_line(state_dir: Path) -> HealthCheck:
    """The state directory (journal, lanes, deliveries, receipts) takes a write and an fsync."""
    try:
        error = await within(asyncio.to_thread(_write_probe, state_dir), PROBE_TIMEOUT)
    except TimeoutError:
        error = f"a write did not finish in {PROBE_TIMEOUT:g}s"
    if error is not None:
        return line("store", "fail", f"{state_dir} refuses a write ({error})",
                    f"make {state_dir} writable by the tree's user, with space free")
    return line("store", "ok", f"{state_dir} takes writes")


def _report(child: Child | None) -> Mapping[str, object] | None:
    """The live process's last heartbeat report (None: not running, or not beaten yet)."""
    beat = child.last_heartbeat if child is not None and child.alive else None
    return beat.report if beat is not None else None


async def health(children: Mapping[str, Child], settings: Settings) -> tuple[HealthCheck, ...]:
    """Every line, in the order ``doctor`` prints them."""
    lines = [child_line(c.name, c.life.state, c.life.reason, c.life.restarts, c.life.restart_reason)
             for c in children.values()]
    service = next((c for c in children.values() if c.spec.proxy), None)
    probes = [metrics_line(settings.metrics_listen), store_line(settings.state_dir)]
    if service is not None:
        probes.append(provider_line(settings))
    lines += await asyncio.gather(*probes)
    bridge = children.get("bridge")
    lines.append(discord_line(_report(bridge), bridge is not None))
    journal = journal_line(_report(bridge), settings.discord_journal_max_bytes)
    if journal is not None:
        lines.append(journal)
    if service is not None:
        lines.append(budget_line(_report(service)))
    lines.append(disk_line(settings.state_dir, free_bytes(settings.state_dir)))
    return tuple(lines)
