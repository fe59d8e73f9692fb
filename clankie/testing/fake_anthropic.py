"""A loopback fake of the Anthropic Messages API that the real SDK reaches via ``base_url``.

``POST /v1/messages`` answers from a script of per-request scenarios: a
:class:`Reply` is streamed as real SSE (``message_start``, blocks with their
deltas, ``message_delta``, ``message_stop``, pings) and can be cut, stalled,
disconnected or broken by a mid-stream ``error`` event; a :class:`Failure`
is an HTTP error with the API's JSON error body. Every request body is
recorded in :attr:`FakeAnthropic.requests`.

A test may instead choose each request's scenario from its body with
:meth:`FakeAnthropic.respond_with` (e.g. hold one room's runs and answer
another's, or act when a request carries a marker).

Usage numbers respond to ``cache_control`` as the API bills them: a prefix
(tools → system → messages) that ends at a breakpoint is written to an
in-memory cache for its lifetime (``ttl`` ``5m`` or ``1h``, on the fake's
clock), a later request that repeats it in time is billed as a cache read,
and the writes are split by lifetime in ``usage.cache_creation``
(:mod:`clankie.testing.fake_anthropic_cache`).

With ``limits`` (:class:`~clankie.testing.fake_anthropic_limits.RateLimits`)
the fake enforces an organisation's rate limits as the API does: every
answer carries ``anthropic-ratelimit-*`` headers, and a request the buckets
cannot take gets a 429 ``rate_limit_error`` with ``retry-after``
(:attr:`FakeAnthropic.rate_limited` counts them).

With ``api_key`` the fake is one account: a request without that key
(``x-api-key`` or ``Authorization: Bearer``) gets a 401.
It also answers as Google Vertex AI does for Claude
(``POST /v1/projects/P/locations/R/publishers/anthropic/models/M:streamRawPredict``:
the model in the path, ``anthropic_version`` in the body, the same event
stream), so the SDK's ``AsyncAnthropicVertex`` reaches it with ``base_url``
set to ``<base_url>/v1``; and as Amazon Bedrock does
(``POST /model/M/invoke-with-response-stream``: the same events, each the
base64 ``bytes`` of a chunk in AWS event-stream binary framing), so
``AsyncAnthropicBedrock`` reaches it with ``base_url``. :attr:`FakeAnthropic.paths`
records every path.

Run ``python -m clankie.testing.fake_anthropic --port 8765`` for a local
demo server that echoes the last user text.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from clankie.clock import Clock, SystemClock
from clankie.testing.fake_anthropic_cache import PromptCache, estimate_tokens, ttl_order_error
from clankie.testing.fake_anthropic_limits import Limiter, RateLimits
from clankie.testing.fake_anthropic_scenarios import (
    Failure,
    Reply,
    Responder,
    Scenario,
    legacy_usage_limit,
    overloaded,
    prompt_too_long,
    rate_limited,
    server_error,
    spend_limit,
    text,
    thinking,
    tool_use,
)
from clankie.testing.fake_anthropic_stream import event_stream_frame, events, frame, message, req_id

__all__ = [  # the scenario helpers are re-exported: tests write fa.text(...), fa.Failure(...)
    "Failure",
    "FakeAnthropic",
    "RateLimits",
    "Reply",
    "Responder",
    "Scenario",
    "legacy_usage_limit",
    "overloaded",
    "prompt_too_long",
    "rate_limited",
    "server_error",
    "spend_limit",
    "text",
    "thinking",
    "tool_use",
]

log = logging.getLogger(__name__)


def _bearer(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization", "")
    return auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None


class FakeAnthropic:
    """The loopback server. Use ``async with FakeAnthropic() as fake:`` and ``fake.base_url``."""

    def __init__(
        self,
        *,
        cache_min_tokens: int = 0,
        echo_by_default: bool = True,
        limits: RateLimits | None = None,
        clock: Clock | None = None,
        api_key: str | None = None,
    ) -> None:
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []  # each request's path, in order (the Vertex path names the model)
        self.api_key = api_key
        self._clock = clock or SystemClock()
        self.limiter = Limiter(limits, self._clock.monotonic()) if limits is not None else None
        self.cache = PromptCache(cache_min_tokens, now=self._clock.monotonic)
        self._script: collections.deque[Scenario] = collections.deque()
        self._echo = echo_by_default
        self.gate: asyncio.Event | None = None  # set to a cleared Event to hold every answer until it is set
        self._responder: Responder | None = None
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()
        self._changed = asyncio.Condition()
        self.base_url = ""
        self.valid_keys: set[str] | None = None  # GET /v1/models accepts these keys only (None: any non-empty one)

    def script(self, *scenarios: Scenario) -> None:
        """Queue scenarios; each request consumes the next one."""
        self._script.extend(scenarios)

    def respond_with(self, responder: Responder | None) -> None:
        """Let ``responder(body)`` choose each request's scenario (recorded first); None defers to the script."""
        self._responder = responder

    @property
    def pending(self) -> int:
        return len(self._script)

    @property
    def rate_limited(self) -> int:
        """How many requests the rate limits refused (429)."""
        return self.limiter.refused if self.limiter is not None else 0

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{target}", self._vertex)
        app.router.add_post("/model/{model}/{action:invoke|invoke-with-response-stream}", self._bedrock)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0][1]
        self.base_url = f"http://{host}:{bound}"
        return self.base_url

    async def close(self) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeAnthropic:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def wait_for_requests(self, count: int) -> None:
        """Wait until at least ``count`` requests have arrived."""
        async with self._changed:
            await self._changed.wait_for(lambda: len(self.requests) >= count)

    # -- handlers --------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        """``GET /v1/models``: what ``clankiectl doctor`` asks to learn that the key works (401 for one refused)."""
        key = request.headers.get("x-api-key", "")
        if not key or (self.valid_keys is not None and key not in self.valid_keys):
            return web.json_response({"type": "error", "error": {"type": "authentication_error",
                                                                 "message": "invalid x-api-key"}}, status=401)
        return web.json_response({"data": [{"type": "model", "id": "claude-fake", "display_name": "Fake"}],
                                  "has_more": False, "first_id": "claude-fake", "last_id": "claude-fake"})

    def _refused(self, given: str | None) -> web.Response | None:
        """A 401 when this fake is one account and the request did not carry its key."""
        if self.api_key is None or given == self.api_key:
            return None
        return self._failure(Failure(status=401, error_type="authentication_error", message="invalid x-api-key"))

    async def _vertex(self, request: web.Request) -> web.StreamResponse:
        """Vertex AI's ``:streamRawPredict`` (``:rawPredict`` unstreamed): the model from the path, then as the API."""
        model, _, specifier = request.match_info["target"].rpartition(":")
        refused = self._refused(_bearer(request))
        if refused is not None:
            return refused
        body = await request.json()
        if specifier not in ("streamRawPredict", "rawPredict") or "model" in body or "anthropic_version" not in body:
            return self._failure(Failure(status=400, error_type="invalid_request_error", message="not a Vertex request"))
        body["model"] = model
        return await self._answer(request, body)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        refused = self._refused(request.headers.get("x-api-key") or _bearer(request))  # the SDK sends either
        if refused is not None:
            return refused
        return await self._answer(request, await request.json())

    async def _bedrock(self, request: web.Request) -> web.StreamResponse:
        """Bedrock's ``invoke-with-response-stream`` (``invoke`` unstreamed): AWS event-stream frames, each a chunk
        whose ``bytes`` are one event's JSON. A Bedrock API key (a bearer) or SigV4 whose access key is this
        account's key is accepted; the signature itself is not verified."""
        auth = request.headers.get("Authorization", "")
        signed = auth.startswith("AWS4-HMAC-SHA256 Credential=")
        refused = self._refused(auth.split("Credential=", 1)[1].split("/", 1)[0] if signed else _bearer(request))
        if refused is not None:
            return refused
        body = await request.json()
        if "model" in body or "stream" in body or "anthropic_version" not in body:
            return self._failure(Failure(status=400, error_type="invalid_request_error", message="not a Bedrock request"))
        body["model"] = request.match_info["model"]
        body["stream"] = request.match_info["action"] == "invoke-with-response-stream"
        return await self._answer(request, body, event_stream_frame, "application/vnd.amazon.eventstream")

    async def _answer(self, request: web.Request, body: dict[str, Any], framed: Callable[[str, dict[str, Any]], bytes] = frame,
                      content_type: str = "text/event-stream") -> web.StreamResponse:
        self.paths.append(request.path)
        self.requests.append(body)
        async with self._changed:
            self._changed.notify_all()
        scenario = self._responder(body) if self._responder is not None else None
        if scenario is None:
            scenario = self._script.popleft() if self._script else self._default(body)
        if self.gate is not None:
            await self._pause(None, self.gate)
        refusal = ttl_order_error(body)
        if refusal is not None:  # as the API: a longer cache lifetime after a shorter one is a bad request
            return self._failure(Failure(status=400, error_type="invalid_request_error", message=refusal))
        limits: dict[str, str] = {}
        if self.limiter is not None:
            now, wall = self._clock.monotonic(), self._clock.wall()
            refused = self.limiter.admit(self.cache.usage(body, record=False)["input_tokens"], now)
            if refused is not None:
                headers, text = self.limiter.refusal(refused, now, wall)
                headers["x-should-retry"] = "true"
                return self._failure(Failure(status=429, error_type="rate_limit_error", message=text, headers=headers))
            limits = self.limiter.headers(now, wall)
        if isinstance(scenario, Failure):
            return self._failure(scenario)
        usage = self.cache.usage(body)
        output = scenario.output_tokens or sum(estimate_tokens(b) for b in scenario.blocks)
        if self.limiter is not None:
            self.limiter.answered(output, self._clock.monotonic())
        if not body.get("stream"):
            return web.json_response(message(body, scenario.blocks, scenario.stop_reason, usage, output), headers=limits)
        response = web.StreamResponse(
            status=200,
            headers={"Content-Type": content_type, "Cache-Control": "no-cache", "request-id": req_id(), **limits},
        )
        await response.prepare(request)
        for index, (name, data) in enumerate(events(body, scenario, usage, output)):
            if index == scenario.cut_after:
                break
            if index == scenario.stall_after:
                await self._pause(scenario.stall_seconds, scenario.stall_until)
            if index == scenario.disconnect_after:
                if request.transport is not None:
                    request.transport.close()
                return response
            if index == scenario.error_after:
                error = {"type": "error", "error": {"type": scenario.error_type, "message": scenario.error_message}}
                await response.write(framed("error", error))
                break
            if index == scenario.garbage_after:
                await response.write(f"event: {name}\ndata: {{not json\n\n".encode())
                break
            await response.write(framed(name, data))
            if scenario.delay:
                await self._pause(scenario.delay, None)
        await response.write_eof()
        return response

    def _failure(self, failure: Failure) -> web.Response:
        error: dict[str, Any] = {"type": failure.error_type, "message": failure.message}
        if failure.error_code:
            error["details"] = {"error_code": failure.error_code}
        headers = {"request-id": req_id(), "x-should-retry": "false", **failure.headers}
        if failure.retry_after is not None:
            headers["retry-after"] = f"{failure.retry_after:g}"
        body = {"type": "error", "error": error, "request_id": headers["request-id"]}
        return web.json_response(body, status=failure.status, headers=headers)

    def _default(self, body: dict[str, Any]) -> Scenario:
        if not self._echo:
            return Failure(status=500, error_type="api_error", message="fake: script exhausted")
        last = (body.get("messages") or [{}])[-1]
        content = last.get("content")
        said = content if isinstance(content, str) else " ".join(
            b.get("text", "") for b in content or [] if isinstance(b, dict)
        )
        return text(f"echo: {said}".strip())

    async def _pause(self, seconds: float | None, until: asyncio.Event | None) -> None:
        waits = [asyncio.ensure_future(self._closing.wait())]
        if until is not None:
            waits.append(asyncio.ensure_future(until.wait()))
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the fake on loopback until interrupted (echoes the last user text)."""
    parser = argparse.ArgumentParser(prog="python -m clankie.testing.fake_anthropic")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)

    async def serve() -> None:
        fake = FakeAnthropic()
        url = await fake.start(args.host, args.port)
        print(f"fake anthropic at {url} (ANTHROPIC_BASE_URL={url})", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await fake.close()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
