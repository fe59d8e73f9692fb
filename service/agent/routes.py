"""The model's routes, in order: the primary, then each fallback of ``CLANKIE_MODEL_ROUTES``; one table per service.

Each :class:`ModelRoute` is one provider (the same Claude model through the
anthropic SDK's own client for its kind), its own
:class:`~service.agent.governor.Governor` (its own account's limits) and its
own :class:`~service.agent.breaker.Breaker`. :meth:`Routes.pick` gives a call
the first route that is up, or, once a down route's wait is over, that route
as its probe (one probe at a time per route). So while the primary is down
new calls go to the next route that is up, a run in flight moves there at its
next call (:class:`~service.agent.attempts.Attempts`), and the first probe
that the primary answers brings traffic back to it.

What takes a route down (:func:`outage`): a 529 or any 5xx, a connection
failure or a timeout (a transient failure with no status), a mid-stream
``overloaded_error``/``api_error``, or a 429 whose wait is longer than
``CLANKIE_MODEL_FAILOVER_AFTER_SECONDS``. A bad request, an auth or usage
failure, or a short 429 is not the route being down: it is answered as
before, on the route that got it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from clankie.clock import Clock
from clankie.metrics import METER, MODEL_FAILOVERS, MODEL_ROUTE_UP
from service.agent.breaker import Breaker, Event, State
from service.agent.failures import FailureKind, ProviderError
from service.agent.governor import Governor
from service.agent.model import Provider

log = logging.getLogger(__name__)

PRIMARY = "primary"
PROVIDER_NAMES = {"anthropic": "anthropic", "vertex": "gcp.vertex_ai", "bedrock": "aws.bedrock"}
"""A route's kind -> OpenTelemetry's ``gen_ai.provider.name``."""
DAY = 86400.0


@dataclass(slots=True)
class ModelRoute:
    """One way to the model; see the module docstring."""

    name: str
    kind: str  # anthropic, vertex or bedrock
    provider: Provider
    governor: Governor
    breaker: Breaker = field(default_factory=Breaker)
    calls_today: int = 0
    day: int = -1  # the UTC day calls_today counts

    @property
    def provider_name(self) -> str:
        return PROVIDER_NAMES.get(self.kind, self.kind)


@dataclass(frozen=True, slots=True)
class Pick:
    """A call's route, and whether the call is that route's probe."""

    route: ModelRoute
    probe: bool


@dataclass(frozen=True, slots=True)
class RouteStatus:
    """One route as ``clankiectl status`` shows it."""

    name: str
    kind: str
    state: State
    calls_today: int
    down_s: float  # how long it has been down (0 while up)
    failovers: int  # times it went down


def outage(err: ProviderError, failover_after: float) -> bool:
    """Does ``err`` say its route is down (a failover), rather than something about the call itself?"""
    if err.kind is not FailureKind.TRANSIENT:
        return False
    if err.status == 429:
        return err.retry_after is not None and err.retry_after > failover_after
    if err.status is None or err.status == 408 or err.status >= 500:
        return True  # a connection failure, a timeout, a 5xx, a 529
    return err.status == 200 and err.error_type in ("overloaded_error", "api_error")


class Routes:
    """The service's routes, tried in order; every call of every lane picks one here."""

    def __init__(self, routes: Sequence[ModelRoute], clock: Clock, *, failover_after: float = 20.0) -> None:
        if not routes:
            raise ValueError("at least one route")
        self._routes = tuple(routes)
        self._clock = clock
        self.failover_after = failover_after
        self._gated = len(self._routes) > 1  # one route: its breaker only reports; every call goes, as it always did
        self.failovers = 0
        for route in self._routes:
            METER.set(MODEL_ROUTE_UP.of(route.name), 1.0)

    @classmethod
    def single(cls, provider: Provider, governor: Governor, clock: Clock) -> Routes:
        """One route, the primary: what a service with no ``CLANKIE_MODEL_ROUTES`` runs."""
        return cls([ModelRoute(PRIMARY, "anthropic", provider, governor)], clock)

    @property
    def all(self) -> tuple[ModelRoute, ...]:
        return self._routes

    @property
    def primary(self) -> ModelRoute:
        return self._routes[0]

    def pick(self) -> Pick | None:
        """The route for the next call (the first up, or a down one due its probe); None: every route is down."""
        now = self._clock.monotonic()
        for route in self._routes:
            breaker = route.breaker
            if breaker.up:
                return Pick(route, False)
            if breaker.due(now) or (not self._gated and breaker.state == "open"):
                log.info("model route %s: probing whether it is back", route.name)
                self._feed(route, "probe", now)
                return Pick(route, True)
            if not self._gated:  # one route: every call goes, a probe in flight or not
                return Pick(route, False)
        return None

    def _feed(self, route: ModelRoute, event: Event, now: float, hint: float | None = None) -> State:
        """The one way a route's breaker moves."""
        return route.breaker.apply(event, now, hint)

    def available(self) -> bool:
        """Would :meth:`pick` find another route now (without taking a probe)? Never with one route."""
        if not self._gated:
            return False
        now = self._clock.monotonic()
        return any(r.breaker.up or r.breaker.due(now) for r in self._routes)

    def started(self, pick: Pick) -> None:
        """A call went out on ``pick`` (today's calls)."""
        route = pick.route
        day = int(self._clock.wall() // DAY)
        if day != route.day:
            route.day, route.calls_today = day, 0
        route.calls_today += 1

    def is_outage(self, err: ProviderError) -> bool:
        """Does ``err`` take its route down (:func:`outage`)? With one route, a 429 never does: it is waited out."""
        return outage(err, self.failover_after if self._gated else math.inf)

    def answered(self, pick: Pick, err: ProviderError | None) -> bool:
        """The call on ``pick`` ended with ``err`` (None: it answered). Returns whether it was an outage."""
        route = pick.route
        down = err is not None and self.is_outage(err)
        hint = err.retry_after if err is not None and down else None
        now = self._clock.monotonic()
        was = route.breaker.state
        event: Event = ("probe_failed" if down else "probe_succeeded") if pick.probe else ("failed" if down else "succeeded")
        state = self._feed(route, event, now, hint)
        if state != was:
            METER.set(MODEL_ROUTE_UP.of(route.name), 1.0 if state == "closed" else 0.0)
        if was == "closed" and state == "open":
            self.failovers += 1
            METER.count(MODEL_FAILOVERS.of(route.name))
            log.warning("model route %s is down (%s); calls go to the next route that is up", route.name,
                        err.status if err is not None and err.status is not None else "no answer")
        elif state == "closed" and was != "closed":
            log.warning("model route %s is back", route.name)
        return down

    def abandoned(self, pick: Pick) -> None:
        """The call on ``pick`` ended with no answer (cancelled): a probe leaves room for the next."""
        if pick.probe and pick.route.breaker.state == "half_open":
            self._feed(pick.route, "probe_abandoned", self._clock.monotonic())

    def status(self) -> list[RouteStatus]:
        now = self._clock.monotonic()
        day = int(self._clock.wall() // DAY)
        return [
            RouteStatus(
                name=r.name, kind=r.kind, state=r.breaker.state, calls_today=r.calls_today if r.day == day else 0,
                down_s=0.0 if r.breaker.down_since is None else max(0.0, now - r.breaker.down_since),
                failovers=r.breaker.opened,
            )
            for r in self._routes
        ]

    async def aclose(self) -> None:
        for route in self._routes:
            await route.provider.aclose()
