"""One model call, attempted until it answers: transient failures retried on the schedule, overflow compacted once.

:class:`Attempts` is the only retry owner of the runtime (the SDK client runs
with ``max_retries=0``). Every provider error is recorded in the session tree
as a ``provider_error`` entry; a transient one is retried after the
:class:`~service.agent.retry.RetryPolicy` delay (``RetryStart``/``RetryEnd``
events); a context overflow calls ``on_overflow`` once (compaction) and
tries again; anything else ends the run with :class:`RunFailed`. Before
every attempt the run's ``gate`` may refuse the call (a spent budget, a run
cap: no request is made, the run ends), and every answer's usage goes to
``charged``.

Every attempt passes the service's one :class:`~service.agent.governor.Governor`,
which paces it to the account's rate limits and hears what its answer said of
them. A 429 ``rate_limit_error`` is not a fault of the call: it pauses every
call in the governor, and the call goes back through the governor without
spending the retry schedule, up to ``rate_limit_retries`` times in a row (a
``retry-after`` beyond the schedule's 60 s bound fails the call, as before).
While a call waits in the governor the run is told (``ProviderWait``): it is
paced, not stalled.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from clankie.clock import Clock
from clankie.metrics import METER, MODEL_REQUEST_DURATION, MODEL_REQUESTS, MODEL_TOKENS
from service.agent import observe
from service.agent.events import AgentEvent, ProviderWait, RetryEnd, RetryStart
from service.agent.failures import FailureKind, ProviderError
from service.agent.governor import Governor, Ticket
from service.agent.model import ModelRequest, ModelResponse, Provider, Signal
from service.agent.outcome import OutcomeKind, Usage
from service.agent.pacing import reports
from service.agent.retry import RetryPolicy
from service.agent.routes import Pick, Routes
from service.agent.session import SessionTree

FAILURE_OUTCOME = {
    FailureKind.USAGE_LIMIT: OutcomeKind.USAGE_LIMIT,
    FailureKind.TRUNCATED: OutcomeKind.RESPONSE_MISSING,
    FailureKind.TRANSIENT: OutcomeKind.MODEL_FAILED,
    FailureKind.FATAL: OutcomeKind.MODEL_FAILED,
    FailureKind.CONTEXT_OVERFLOW: OutcomeKind.MODEL_FAILED,
}


class RunFailed(Exception):
    """The run cannot go on; it settles with ``kind``."""

    def __init__(self, kind: OutcomeKind) -> None:
        super().__init__(kind)
        self.kind = kind


class Attempts:
    """Calls the provider for one run's requests, retrying as the policy allows."""

    def __init__(
        self,
        *,
        provider: Provider,
        session: SessionTree,
        clock: Clock,
        policy: RetryPolicy,
        emit: Callable[[AgentEvent], None],
        governor: Governor | None = None,
        rate_limit_retries: int = 10,
        routes: Routes | None = None,
    ) -> None:
        self._session = session
        self._clock = clock
        self._policy = policy
        self._emit = emit
        self._routes = routes or Routes.single(provider, governor or Governor(clock, max_concurrent=1 << 16), clock)
        self._rate_limit_retries = rate_limit_retries
        self.gate: Callable[[], OutcomeKind | None] = lambda: None  # before every call: a refusal ends the run
        self.charged: Callable[[Usage, str, bool], None] = lambda usage, model, summary: None  # after every answer

    async def complete(
        self,
        run_id: str,
        request: Callable[[], ModelRequest],
        on_signal: Callable[[Signal], None],
        *,
        on_overflow: Callable[[], Awaitable[bool]] | None = None,
    ) -> ModelResponse:
        """The response to ``request()`` (rebuilt for each attempt); raises :class:`RunFailed`."""
        attempt = 0
        limited = 0
        moved = 0  # failovers of this call: each took a route down, so at most one per route and probe
        overflowed = False
        first: ProviderError | None = None  # every route down: the run fails with the first route's cause
        while True:
            pick = self._routes.pick()
            try:
                if pick is None:  # every route is down and none is due its probe: as the last failure, unsent
                    raise first or ProviderError(FailureKind.TRANSIENT, "every model route is down")
                response = await self._call(run_id, pick, request, on_signal)
            except ProviderError as err:
                down = False
                if pick is not None:
                    self._record(run_id, err, attempt, pick.route.name)
                    down = self._routes.answered(pick, err)
                    first = first or err
                    if down and moved < self._max_moves and self._routes.available():
                        moved += 1  # the run goes on on the next route that is up, at once: no retry spent
                        continue
                if pick is not None and self._waits_out(err) and not down and limited < self._rate_limit_retries:
                    limited += 1  # the governor is paused now; this call waits there with every other
                    continue
                if err.kind is FailureKind.CONTEXT_OVERFLOW and on_overflow is not None and not overflowed:
                    overflowed = True
                    if await on_overflow():
                        continue
                delay = self._policy.delay(attempt + 1, err.retry_after)
                if err.kind is FailureKind.TRANSIENT and delay is not None:
                    attempt += 1
                    reason = err.error_type or err.kind.value
                    self._emit(
                        RetryStart(
                            run_id=run_id, attempt=attempt, max_attempts=self._policy.max_retries, delay=delay, reason=reason
                        )
                    )
                    await self._clock.sleep(delay)
                    continue
                if attempt:
                    self._emit(RetryEnd(run_id=run_id, attempt=attempt, success=False))
                raise RunFailed(FAILURE_OUTCOME[err.kind]) from None
            if attempt:
                self._emit(RetryEnd(run_id=run_id, attempt=attempt, success=True))
            return response

    @property
    def _max_moves(self) -> int:
        return 2 * len(self._routes.all)

    def _waits_out(self, err: ProviderError) -> bool:
        """A 429 the governor waits out: a rate limit whose wait (if it names one) is within the schedule's bound."""
        return err.rate_limited and (err.retry_after is None or err.retry_after <= self._policy.max_retry_after)

    async def _call(self, run_id: str, pick: Pick, request: Callable[[], ModelRequest],
                    on_signal: Callable[[Signal], None]) -> ModelResponse:
        """One attempt on ``pick``'s route, through its governor (if the gate lets it); the answer goes back to both."""
        refused = self.gate()
        if refused is not None:  # a spent budget or a run cap: no request is made
            self._routes.abandoned(pick)
            raise RunFailed(refused)
        route = pick.route
        provider = route.provider
        settled = False
        try:
            async with route.governor.call(lambda waiting: self._emit(ProviderWait(run_id=run_id, waiting=waiting))) as ticket:
                asked = request()
                started = self._clock.monotonic()
                self._routes.started(pick)
                with observe.chat(observe.ModelCall(model=provider.model, max_tokens=asked.max_tokens, server=provider.server,
                                                     provider=route.provider_name)) as span:
                    try:
                        response = await provider.complete(asked, self._first_chunk(on_signal, span, started, ticket))
                    except ProviderError as err:
                        settled = True
                        result = "rate_limited" if err.rate_limited else err.kind.value
                        seconds = self._clock.monotonic() - started
                        span.failed(result, seconds)
                        _measured(route.name, result, seconds)
                        ticket.answered(reports(err.rate_limits))
                        if self._waits_out(err) and not self._routes.is_outage(err):
                            ticket.throttled(err.retry_after)
                        raise
                    seconds = self._clock.monotonic() - started
                    span.answered(response.model, response.usage, response.stop_reason, response.id, seconds)
                settled = True
                self._routes.answered(pick, None)
                _measured(route.name, "ok", seconds, response.usage)
                usage = response.usage
                ticket.answered(reports(response.rate_limits), usage.input + usage.cache_write, usage.output)
                self.charged(usage, response.model, asked.summary)
                return response
        finally:
            if not settled:  # cancelled (an abort) or refused before an answer: a probe makes room for the next
                self._routes.abandoned(pick)

    def _first_chunk(self, on_signal: Callable[[Signal], None], span: observe.ChatSpan,
                     started: float, ticket: Ticket) -> Callable[[Signal], None]:
        """``on_signal``, and the first signal of the stream (its first chunk) also tells the span how long it took;
        ``opened`` (the account took the call) goes to the governor only."""
        first = True

        def signal(sign: Signal) -> None:
            nonlocal first
            if sign.kind == "opened":
                ticket.opened(reports(sign.rate_limits))
                return
            if first:
                first = False
                span.first_chunk(self._clock.monotonic() - started)
            on_signal(sign)

        return signal

    def _record(self, run_id: str, err: ProviderError, attempt: int, route: str) -> None:
        self._session.append_custom(
            "provider_error",
            {
                "run_id": run_id,
                "route": route,
                "kind": err.kind.value,
                "status": err.status,
                "error_type": err.error_type,
                "error_code": err.error_code,
                "detail": err.detail,
                "attempt": attempt,
            },
        )
        self._session.sync()


def _measured(route: str, result: str, seconds: float, usage: Usage | None = None) -> None:
    """One model call for the metrics endpoint: its route, result (ok, rate_limited or the failure's kind), time and tokens."""
    METER.count(MODEL_REQUESTS.of(route, result))
    METER.observe(MODEL_REQUEST_DURATION, seconds)
    if usage is not None:
        for kind, n in (("input", usage.input), ("output", usage.output), ("cache_read", usage.cache_read),
                        ("cache_creation", usage.cache_write)):
            if n:
                METER.count(MODEL_TOKENS.of(kind), by=float(n))
