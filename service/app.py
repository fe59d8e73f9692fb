"""The ``service`` process: the captain on ``service.sock``, reporting to the supervisor over its link.

Composition root: settings in, one Anthropic provider (or none: every turn
then fails ``captain_provider_unconfigured`` without touching the network),
lazy host clients, the captain, the turn service, the link. Everything a
turn needs is imported before any of that (:func:`warm`), so a warm spare
parks with it loaded and no first turn pays an import. The socket is the
one the supervisor handed down (:func:`clankie.handover.inherited_listener`)
or, started by hand or with the hand-over off, one bound here. The supervisor
gets ``ready`` once the socket is served and a heartbeat every
``heartbeat_seconds`` listing every live run with the CLOCK_BOOTTIME age of
its last agent event; it may answer with ``abort_run``, ``lanes`` or ``say``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from clankie import ipc, spend
from clankie.child import tree_id
from clankie.clock import Clock, SystemClock
from clankie.entry import ChildSpec, Ready, run_child
from clankie.errors import RemoteError
from clankie.handover import inherited_listener
from clankie.metrics import (
    BUDGET_LIMIT_TOKENS,
    BUDGET_LIMIT_USD,
    BUDGET_REMAINING_TOKENS,
    BUDGET_REMAINING_USD,
    BUDGET_UNBOUNDED,
    LANES_LIVE,
    LANES_ON_DISK,
    METER,
)
from clankie.paths import ensure_private_dir, socket_path
from clankie.peers import HANDED
from clankie.protocol import (
    AbortReply,
    AbortRun,
    BudgetInfo,
    BudgetReply,
    BudgetRequest,
    Code,
    Heartbeat,
    LanesReply,
    LanesRequest,
    build_records,
)
from clankie.router import Router
from clankie.settings import Settings
from service import fdlimit, telemetry
from service.agent.governor import SLOW_START_PATIENCE, Governor
from service.agent.learned import Learned
from service.agent.model import Provider
from service.agent.routes import PRIMARY, ModelRoute, Routes
from service.captain.deliveries import DeliveryStore, Evidence
from service.captain.lanes import Captain, CaptainDeps, CaptainPaths, count_disk_lanes
from service.captain.service import TurnService
from service.captain.spend import Spending, budget_key
from service.captain.stores import file_stores
from service.captain.tools import HostClient, ImportingClient
from service.observability import PARTS

if TYPE_CHECKING:  # imported at run time only in the postgres profile (the driver)
    from service.captain.pg_stores import PgStores

log = logging.getLogger(__name__)

FIRST_TURN_IMPORTS = (
    "anyio._backends._asyncio",  # httpx's transport picks its backend on the first request
    "opentelemetry.propagate",  # the SDK's tracing loads its propagators on the first request
    "concurrent.futures.thread",  # the loop's default executor (getaddrinfo) starts on the first request
    "queue",
)
"""What the first turn would import lazily (tests/service/test_warm.py keeps this list honest)."""

# a stalled abort is confirmed only once the run has ended, within this share of the supervisor's grace
ABORT_CONFIRM_SHARE = 0.8
STORE_CLOSE_SECONDS = 5.0
ON_DISK_EVERY_S = 30.0  # clankie_lanes_on_disk is counted (one scandir of the lane directories) at most this often
BUDGET_UNITS = (("tokens", BUDGET_REMAINING_TOKENS, BUDGET_LIMIT_TOKENS), ("usd", BUDGET_REMAINING_USD, BUDGET_LIMIT_USD))
"""Each unit of the tree's day budget: its key in the heartbeat's spending figures, its remaining and its limit gauges."""


def make_provider(settings: Settings) -> Provider | None:
    """The demo model in demo mode, else the Anthropic provider, or None when no API key is configured."""
    if settings.demo:  # the settings refuse demo mode with a real key
        from service.agent.demo import DemoProvider

        log.warning("demo mode: every turn is answered by the built-in offline model")
        return DemoProvider(settings.attachment_root)
    if settings.anthropic_api_key is None or not settings.anthropic_api_key.get_secret_value().strip():
        return None
    from service.agent.provider import AnthropicProvider

    return AnthropicProvider(
        api_key=settings.anthropic_api_key.get_secret_value(),
        model=settings.model,
        base_url=settings.anthropic_base_url,
    )


def _age(seconds: float) -> str:
    s = int(seconds)
    return f"{s}s" if s < 120 else f"{s // 60}m"


def make_routes(settings: Settings, provider: Provider | None, primary: Governor,
                governor: Callable[[str], Governor]) -> Routes | None:
    """The primary (``provider`` through ``primary``) then each fallback route of ``CLANKIE_MODEL_ROUTES`` with its
    own governor; None without a provider. A fallback whose secret did not reach this process is left out, said once."""
    if provider is None:
        return None
    routes = [ModelRoute(PRIMARY, "anthropic", provider, primary)]
    if settings.model_routes and not settings.demo:
        from service.agent.provider import AnthropicProvider

        for route in settings.model_routes:
            secret = settings.route_secret(route.name)
            if route.credential is not None and secret is None:
                log.warning("model route %s: its credential %s holds nothing here; the route is left out",
                            route.name, route.credential)
                continue
            routes.append(ModelRoute(
                route.name, route.kind,
                AnthropicProvider.for_route(route, None if secret is None else secret.get_secret_value(), settings.model),
                governor(route.name),
            ))
    return Routes(routes, primary.clock, failover_after=settings.model_failover_after_seconds)


def browser_client(settings: Settings, clock: Clock) -> HostClient:
    """The browser host's client: the supervisor's child at ``<runtime>/browser.sock``, or the host in its own unit
    at ``CLANKIE_BROWSER_SOCKET``, whose screenshots are verified and copied under our root (docs/operations.md)."""
    if settings.browser_host == "child":
        return HostClient("browser", socket_path(settings.runtime_dir, "browser"), clock)
    return ImportingClient("browser", settings.browser_socket, clock, source=settings.browser_artifacts,
                           root=settings.attachment_root, max_bytes=settings.discord_upload_limit_bytes)


class ServiceApp:
    """Everything the service process runs; usable in-process by tests."""

    def __init__(
        self, settings: Settings, clock: Clock | None = None, provider: Provider | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.environ = environ if environ is not None else {}  # where run() finds the inherited socket
        self.clock = clock or SystemClock()
        self.provider = provider if provider is not None else make_provider(settings)
        rt = settings.runtime_dir
        # a host the tree does not run (CLANKIE_HOSTS) has no client, so the model is not offered its tools
        self.browser = browser_client(settings, self.clock) if "browser" in settings.hosts else None
        self.tldraw = HostClient("tldraw", socket_path(rt, "tldraw"), self.clock) if "tldraw" in settings.hosts else None
        paths = CaptainPaths.under(settings.state_dir)
        ensure_private_dir(paths.root)
        self.learned = Learned(paths.root, self.clock)  # each route's learned window, across restarts
        self.governor = self._governor(PRIMARY)
        self.routes = make_routes(settings, self.provider, self.governor, self._governor)
        self.pg: PgStores | None = None
        if settings.store == "postgres":  # the driver is loaded only in this profile
            from clankie.store.leases import tree_holder
            from service.captain.pg_stores import PgStores
            self.pg = PgStores(settings, paths, tree_holder(settings.state_dir))  # the bridge's name on them too
            stores = self.pg.stores()
        else:
            stores = file_stores(paths, settings.discord_shard_count)
        self.spending = Spending(settings, self.clock, paths.root, ledger=stores.ledger, shard=stores.shard)
        self.store = DeliveryStore(stores.deliveries, self.clock, settings.delivery_record_retention_seconds,
                                   max_retained=settings.delivery_max_retained, tree=tree_id(self.environ))
        self.captain = Captain(
            CaptainDeps(
                settings=settings,
                clock=self.clock,
                provider=self.provider,
                browser=self.browser,
                tldraw=self.tldraw,
                joins=self.store.join,
                governor=self.governor,
                spending=self.spending,
                routes=self.routes,
                lane_store=stores.lane,
            )
        )
        if self.pg is not None:
            self.pg.on_lost = self.captain.stop_serving  # a lease lost drops that shard's lanes
        evidence = Evidence(paths.evidence, self.clock)
        self.turns = TurnService(self.captain, self.store, evidence, self.clock, poison_runs=settings.poison_runs,
                                 held=stores.held, shard=stores.shard)
        self.server: ipc.Server | None = None
        self.socket_path = socket_path(rt, "service")
        self._on_disk_at: float | None = None  # when clankie_lanes_on_disk was last counted

    def _governor(self, route: str) -> Governor:
        """Route ``route``'s governor: its own account's pace, slow-started from what an earlier life learned."""
        return Governor(self.clock, max_concurrent=self.settings.model_max_concurrent,
                        slow_start=self.settings.model_slow_start, window=self.learned.window(route),
                        remember=self.learned.remember(route), patience=SLOW_START_PATIENCE)

    async def start(self, listener: socket.socket | None = None) -> None:
        """Serve turns: on ``listener`` (inherited from the supervisor) or on a socket bound here."""
        if self.pg is not None:
            await self.pg.hold(self.clock)  # this tree's shards, before a turn writes for one
        await asyncio.to_thread(self.spending.load)  # today's totals, before the first turn is taken
        pruned = self.store.prune()
        if pruned:
            log.info("pruned %d expired delivery records", pruned)
        ensure_private_dir(self.settings.runtime_dir)
        self.server = await ipc.serve(
            self.socket_path, "service", self.turns.handle, max_frame=self.settings.max_frame_bytes, sock=listener,
            limits=ipc.Limits(hello_timeout=self.settings.ipc_hello_seconds), admit=HANDED.admit,  # the bridge only
        )
        log.info("serving turns on %s (provider %s)", self.socket_path.name, "configured" if self.provider else "unconfigured")

    async def prepare(self) -> None:
        """Nothing: the service is built only once activated (:data:`SPEC` parks first)."""

    async def run(self, ready: Ready) -> None:
        """The process's life (:func:`clankie.entry.run_child`): serve, say ready, serve until cancelled."""
        await self.start(inherited_listener("service", self.environ))
        await ready()
        await asyncio.Event().wait()

    async def close(self) -> None:
        """Stop gracefully: turns in flight are answered ``shutting_down`` and left for the restart."""
        self.turns.begin_shutdown()
        await self.captain.aclose()
        await self.turns.drain()
        try:  # the lines are in the kernel already; a hung disk must not hold the stop until SIGKILL
            async with asyncio.timeout(STORE_CLOSE_SECONDS):
                await self.store.aclose()
        except TimeoutError:
            log.warning("delivery records not synced within %.0fs of stopping; left to the kernel", STORE_CLOSE_SECONDS)
        await asyncio.sleep(0)  # let the handlers send their shutting_down answers before the sockets close
        if self.server is not None:
            await self.server.close()
            self.server = None
        for host in (self.browser, self.tldraw):
            if host is not None:
                await host.aclose()
        self.learned.flush()
        if self.routes is not None:
            await self.routes.aclose()  # the primary's provider and every fallback's
        elif self.provider is not None:
            await self.provider.aclose()
        if self.pg is not None:
            await self.pg.close()  # the shards handed back at once
        telemetry.shutdown()  # the spans still batched go out now

    @functools.cached_property
    def link_handler(self) -> Router:
        """What the supervisor may ask of the service (``shutdown``/``activate`` are the link's own)."""
        return Router("child", {"abort_run": self._abort_run, "lanes": self._lanes, "say": self.turns.say,
                                "budget": self._budget},
                      unserved={"shutdown", "activate", "peers", "probe_artifact", "resolve_artifact"})

    async def _abort_run(self, params: AbortRun) -> AbortReply:
        if params.reason != "stalled":  # the operator's proxy answers within 10 s: report the abort as sent
            aborted = self.captain.abort(params.lane, params.run_id, params.reason)
            self.turns.evidence.record("operator", "abort", lane=params.lane, cause=None if aborted else "no_live_run",
                                       caller=params.caller)
            return AbortReply(aborted=aborted)
        wait = self.settings.stall_abort_grace_seconds * ABORT_CONFIRM_SHARE
        return AbortReply(aborted=await self.captain.abort_confirmed(params.lane, params.run_id, params.reason, wait))

    async def _lanes(self, params: LanesRequest) -> LanesReply:
        infos = await self.captain.lane_listing(params.hash)
        dirs = self.captain.lane_directories()
        spent = await asyncio.to_thread(lambda: {key: spend.of_directory(d) for key, d in dirs.items()})
        rows = []
        for info in infos:
            update: dict[str, object] = {"tokens": spent.get(info.key)}
            room = self.captain.room_of(info.key)
            if room is not None:
                update.update(self.spending.lane_view(info.key, room))
                tokens = spent.get(info.key)
                if update["cache_read_share"] is None and tokens is not None and tokens.read_share is not None:
                    update["cache_read_share"] = round(tokens.read_share, 4)  # from its trees, before this process
            rows.append(info.model_copy(update=update))
        return LanesReply(lanes=tuple(rows))

    async def _budget(self, params: BudgetRequest) -> BudgetReply:
        """``clankiectl budget``: show, raise or reset one budget live; a move is audited in the evidence."""
        sp = self.spending
        message = ""
        if params.action != "show":
            key = budget_key(params.key)
            if key is None:
                raise RemoteError(Code.INVALID_BUDGET, "a budget key is tree, room:<guild|dm>/<channel> or user:<id>")
            tokens, usd = (0, 0.0) if params.unlimited else (params.tokens, params.usd)  # 0 inside: no limit
            standing = sp.operate(params.action, key, tokens, usd, caller=params.caller)
            cause = f"tokens={standing.limit.tokens} usd={standing.limit.usd:g}" if params.action == "raise" else None
            cause = "unlimited" if params.unlimited else cause
            self.turns.evidence.record("operator", f"budget_{params.action}", lane=key, cause=cause,
                                       caller=params.caller)
            message = f"{params.action} {key}"
            keys = [key]
        else:
            keys = sorted(sp.budgets.keys(), key=lambda k: (k != "tree", k))[: self.settings.lanes_list_max]
            keys = keys if "tree" in keys else ["tree", *keys]
        rows = []
        for key in keys:
            s = sp.budgets.standing(key)
            rows.append(BudgetInfo(key=key, spent_tokens=s.spent.tokens, spent_usd=round(s.spent.usd, 6),
                                   limit_tokens=s.limit.tokens, limit_usd=s.limit.usd, tokens_left=s.tokens_left,
                                   usd_left=None if s.usd_left is None else round(s.usd_left, 6)))
        return BudgetReply(day=sp.budgets.day, budgets=tuple(rows), message=message)

    def heartbeat(self) -> Heartbeat:
        runs = self.captain.runs()
        zombies = len(self.captain.zombies)
        counts = self.captain.lane_counts()
        detail = f"{counts['lanes_live']} lanes ({counts['lanes_evicted']} evicted), {len(runs)} live runs"
        refused = sum(self.server.refusals.values()) if self.server is not None else 0
        if refused:  # clients of service.sock that were not the bridge (clankie.peers)
            detail += f", {refused} peers refused"
        if zombies:
            detail += f", {zombies} aborted runs not stopping"
        if self.provider is None:
            detail += ", provider unconfigured"
        paced = self.governor.status()
        if paced.waiting or paced.paused_s:
            detail += f", model calls: {paced.waiting} waiting for the rate limit"
            if paced.paused_s:
                detail += f" (paused {paced.paused_s:.0f}s by a 429)"
        routes = self.routes.status() if self.routes is not None else []
        if len(routes) > 1:  # which way the model is reached, and how much each way took today
            detail = "routes " + ", ".join(
                f"{r.name} {'up' if r.state == 'closed' else 'down ' + _age(r.down_s)} {r.calls_today}" for r in routes
            ) + "; " + detail
        fds, fd_limit = fdlimit.usage()
        detail += f", fds {fds}/{fd_limit}, {self.spending.detail()}"

        report = {"lanes": len(self.captain.lanes), "runs": len(runs), "zombie_runs": zombies, **counts,
                  "fds": fds, "fd_limit": fd_limit, "model_calls_in_flight": paced.in_flight,
                  "model_calls_waiting": paced.waiting, "model_paused_s": round(paced.paused_s, 1),
                  "model_rate_limited": paced.throttled, "model_ratelimit_remaining": paced.remaining,
                  **self.spending.report(),
                  "model_routes": [{"name": r.name, "kind": r.kind, "state": r.state, "calls_today": r.calls_today,
                                    "down_s": round(r.down_s, 1), "failovers": r.failovers} for r in routes],
                  "peers_refused": dict(self.server.refusals) if self.server is not None else {}}
        self._gauges(counts["lanes_live"], report)
        return Heartbeat(detail=detail[:200], runs=runs, report=report)

    def _gauges(self, live: int, report: Mapping[str, object]) -> None:
        """The service's gauges for the metrics endpoint (nothing while metrics are off)."""
        if not METER.enabled:
            return
        METER.set(LANES_LIVE.of(), float(live))
        for unit, remaining, budget in BUDGET_UNITS:  # the tree's day budget, from the spending figures this heartbeat reports
            left, limit = report.get(f"budget_{unit}_left"), report.get(f"budget_{unit}_limit")
            if isinstance(left, int | float) and isinstance(limit, int | float) and limit > 0:
                METER.set(remaining.of("tree"), float(max(0, left)))  # one unit per family
                METER.set(budget.of("tree"), float(limit))
        unbounded = report.get("budget_unbounded")
        for scope in ("tree", "room", "user"):  # 1: that scope has no day budget at all
            METER.set(BUDGET_UNBOUNDED.of(scope), 1.0 if isinstance(unbounded, list) and scope in unbounded else 0.0)
        now = self.clock.monotonic()
        if self._on_disk_at is None or now - self._on_disk_at >= ON_DISK_EVERY_S:
            self._on_disk_at = now
            METER.set(LANES_ON_DISK.of(), float(count_disk_lanes(self.captain.paths, self.captain.lanes)))


def warm() -> None:
    """Import what a turn needs (the Anthropic SDK above all) and build every wire record's validator
    (:func:`clankie.protocol.build_records`) before the process says ready.

    Runs before any event loop, in a cold start and in a warm spare alike;
    it reads no settings and opens no state.
    """
    import importlib

    build_records()
    from service.agent.provider import rehearse  # anthropic, httpx: most of the cold start

    for name in FIRST_TURN_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:  # another SDK version: it may not need it, and a turn will say if it does
            log.debug("warm: %s is not importable", name)
    try:
        asyncio.run(rehearse())  # its own short-lived loop, closed before the process's real one starts
    except Exception:  # a rehearsal that fails costs the first turn its warm-up, never the process
        log.warning("warm: the SDK rehearsal failed", exc_info=True)


def build(settings: Settings, environ: Mapping[str, str]) -> ServiceApp:
    """This life's service, once activated: raise the fd limit, then build (see :data:`SPEC`)."""
    fdlimit.raise_to_hard()
    return ServiceApp(settings, environ=environ)


SPEC = ChildSpec("service", build, keeps_secrets=True, parks_first=True, warm=warm, observability=PARTS)
"""The model key is handed over and kept; a warm spare parks (its imports warm) before it reads any. Its tracer
(only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set) and its records' rotations are set with the meter, once."""


def main(environ: Mapping[str, str] | None = None) -> int:
    """The whole life of the service process; returns its exit status."""
    return run_child(SPEC, environ)
