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

Usage numbers respond to ``cache_control``: a prefix (tools → system →
messages) that ends at a breakpoint is written to an in-memory cache, and a
later request that repeats it is billed as a cache read.

Run ``python -m clankie.testing.fake_anthropic --port 8765`` for a local
demo server that echoes the last user text.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import itertools
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)

LOOKBACK_BLOCKS = 20


@dataclass(frozen=True, kw_only=True)
class Reply:
    """One streamed (or JSON) answer and the misbehaviour to apply to it.

    Event indices count SSE events from 0 (``message_start``). ``cut_after``
    ends the body cleanly before event N (no ``message_stop``);
    ``stall_after`` holds the connection silent before event N until
    ``stall_until`` is set, ``stall_seconds`` pass, or the server closes;
    ``disconnect_after`` drops the TCP connection; ``error_after`` sends an
    ``error`` event instead of event N and closes; ``garbage_after`` sends a
    ``data:`` line that is not JSON instead of event N and closes.
    """

    blocks: list[dict[str, Any]]
    stop_reason: str | None = "end_turn"
    chunk_size: int = 12
    pings: int = 0
    delay: float = 0.0
    cut_after: int | None = None
    stall_after: int | None = None
    stall_seconds: float | None = None
    stall_until: asyncio.Event | None = None
    disconnect_after: int | None = None
    error_after: int | None = None
    garbage_after: int | None = None
    error_type: str = "overloaded_error"
    error_message: str = "Overloaded"
    output_tokens: int | None = None


@dataclass(frozen=True, kw_only=True)
class Failure:
    """An HTTP error response with the API's error body."""

    status: int
    error_type: str
    message: str
    error_code: str | None = None
    retry_after: float | None = None
    headers: dict[str, str] = field(default_factory=dict)


Scenario = Reply | Failure
Responder = Callable[[dict[str, Any]], Scenario | None]


# -- scenario helpers ----------------------------------------------------------


def text(*chunks: str, **options: Any) -> Reply:
    """A plain text answer (the chunks are joined into one block)."""
    return Reply(blocks=[{"type": "text", "text": "".join(chunks)}], **options)


def tool_use(*calls: tuple[str, dict[str, Any]], text: str | None = None, **options: Any) -> Reply:
    """An answer that calls tools: ``tool_use(("name", {...}), ...)``."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for name, args in calls:
        blocks.append({"type": "tool_use", "id": f"toolu_{next(_ids):06d}", "name": name, "input": args})
    return Reply(blocks=blocks, stop_reason="tool_use", **options)


def thinking(thought: str, answer: str, **options: Any) -> Reply:
    """A thinking block followed by a text answer."""
    blocks = [
        {"type": "thinking", "thinking": thought, "signature": "sig-fake"},
        {"type": "text", "text": answer},
    ]
    return Reply(blocks=blocks, **options)


def overloaded() -> Failure:
    return Failure(status=529, error_type="overloaded_error", message="Overloaded")


def server_error() -> Failure:
    return Failure(status=500, error_type="api_error", message="Internal server error")


def rate_limited(retry_after: float | None = None, error_code: str | None = None) -> Failure:
    return Failure(
        status=429,
        error_type="rate_limit_error",
        message="Number of request tokens has exceeded your per-minute rate limit",
        error_code=error_code,
        retry_after=retry_after,
    )


def spend_limit() -> Failure:
    """A 429 carrying a spend-limit ``error_code``: a usage limit, never retried."""
    return Failure(
        status=429,
        error_type="rate_limit_error",
        message="This organization has crossed the monthly API usage threshold of its API tier.",
        error_code="enforced_spend_limit_reached",
    )


def legacy_usage_limit() -> Failure:
    return Failure(
        status=400,
        error_type="invalid_request_error",
        message="You have reached your specified API usage limits. You will regain access on 2026-12-01 at 00:00 UTC.",
    )


def prompt_too_long(tokens: int = 210_000, maximum: int = 200_000) -> Failure:
    return Failure(
        status=400,
        error_type="invalid_request_error",
        message=f"prompt is too long: {tokens} tokens > {maximum} maximum",
    )


_ids = itertools.count(1)


# -- usage with a prompt cache -------------------------------------------------


def _strip(block: Any) -> Any:
    if isinstance(block, dict):
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def _segments(body: dict[str, Any]) -> list[tuple[Any, bool]]:
    """Cacheable blocks in prefix order (tools, system, messages) with their breakpoint flag."""
    out: list[tuple[Any, bool]] = []
    for tool in body.get("tools") or []:
        out.append((tool, "cache_control" in tool))
    system = body.get("system")
    if isinstance(system, str) and system:
        out.append(({"type": "text", "text": system}, False))
    elif isinstance(system, list):
        out.extend((b, "cache_control" in b) for b in system)
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for block in blocks:
            out.append(({"role": message.get("role"), **_strip(block)}, "cache_control" in block))
    if body.get("cache_control") and out:
        out[-1] = (out[-1][0], True)
    return out


def estimate_tokens(obj: Any) -> int:
    """The fake's tokenizer: four characters of canonical JSON per token."""
    return max(1, len(json.dumps(_strip(obj), sort_keys=True, ensure_ascii=False)) // 4)


class PromptCache:
    """Prefix hashes written at breakpoints; reads are looked up within 20 blocks back."""

    def __init__(self, min_tokens: int = 0) -> None:
        self.min_tokens = min_tokens
        self._written: set[str] = set()

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        segments = _segments(body)
        digest = hashlib.sha256(str(body.get("model")).encode())
        cum_tokens: list[int] = []
        cum_hash: list[str] = []
        total = 0
        for block, _ in segments:
            total += estimate_tokens(block)
            digest.update(json.dumps(_strip(block), sort_keys=True).encode())
            cum_tokens.append(total)
            cum_hash.append(digest.copy().hexdigest())
        breakpoints = [i for i, (_, bp) in enumerate(segments) if bp and cum_tokens[i] >= self.min_tokens]
        read = 0
        for bp in breakpoints:
            for j in range(bp, max(-1, bp - LOOKBACK_BLOCKS - 1), -1):
                if cum_hash[j] in self._written:
                    read = max(read, cum_tokens[j])
                    break
        write = max(0, cum_tokens[breakpoints[-1]] - read) if breakpoints else 0
        self._written.update(cum_hash[i] for i in breakpoints)
        return {
            "input_tokens": max(0, total - read - write),
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
        }


# -- the server ----------------------------------------------------------------


class FakeAnthropic:
    """The loopback server. Use ``async with FakeAnthropic() as fake:`` and ``fake.base_url``."""

    def __init__(self, *, cache_min_tokens: int = 0, echo_by_default: bool = True) -> None:
        self.requests: list[dict[str, Any]] = []
        self.cache = PromptCache(cache_min_tokens)
        self._script: collections.deque[Scenario] = collections.deque()
        self._echo = echo_by_default
        self.gate: asyncio.Event | None = None  # set to a cleared Event to hold every answer until it is set
        self._responder: Responder | None = None
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()
        self._changed = asyncio.Condition()
        self.base_url = ""

    def script(self, *scenarios: Scenario) -> None:
        """Queue scenarios; each request consumes the next one."""
        self._script.extend(scenarios)

    def respond_with(self, responder: Responder | None) -> None:
        """Let ``responder(body)`` choose each request's scenario (recorded first); None defers to the script."""
        self._responder = responder

    @property
    def pending(self) -> int:
        return len(self._script)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
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

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        async with self._changed:
            self._changed.notify_all()
        scenario = self._responder(body) if self._responder is not None else None
        if scenario is None:
            scenario = self._script.popleft() if self._script else self._default(body)
        if self.gate is not None:
            await self._pause(None, self.gate)
        if isinstance(scenario, Failure):
            return self._failure(scenario)
        usage = self.cache.usage(body)
        output = scenario.output_tokens or sum(estimate_tokens(b) for b in scenario.blocks)
        if not body.get("stream"):
            return web.json_response(_message(body, scenario.blocks, scenario.stop_reason, usage, output))
        response = web.StreamResponse(
            status=200,
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "request-id": _req_id()},
        )
        await response.prepare(request)
        for index, (name, data) in enumerate(_events(body, scenario, usage, output)):
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
                await response.write(_frame("error", error))
                break
            if index == scenario.garbage_after:
                await response.write(f"event: {name}\ndata: {{not json\n\n".encode())
                break
            await response.write(_frame(name, data))
            if scenario.delay:
                await self._pause(scenario.delay, None)
        await response.write_eof()
        return response

    def _failure(self, failure: Failure) -> web.Response:
        error: dict[str, Any] = {"type": failure.error_type, "message": failure.message}
        if failure.error_code:
            error["details"] = {"error_code": failure.error_code}
        headers = {"request-id": _req_id(), "x-should-retry": "false", **failure.headers}
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


def _req_id() -> str:
    return f"req_fake{next(_ids):08d}"


def _frame(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _message(
    body: dict[str, Any], blocks: list[dict[str, Any]], stop: str | None, usage: dict[str, int], output: int
) -> dict[str, Any]:
    return {
        "id": f"msg_fake{next(_ids):08d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "fake"),
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": output},
    }


def _chunks(value: str, size: int) -> Iterator[str]:
    for start in range(0, len(value), size):
        yield value[start : start + size]


def _events(
    body: dict[str, Any], reply: Reply, usage: dict[str, int], output: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    start = _message(body, [], None, usage, 1)
    yield "message_start", {"type": "message_start", "message": start}
    for _ in range(reply.pings):
        yield "ping", {"type": "ping"}
    for index, block in enumerate(reply.blocks):
        yield from _block_events(index, block, reply.chunk_size)
    if reply.stop_reason is not None:
        delta = {"stop_reason": reply.stop_reason, "stop_sequence": None}
        yield "message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": output}}
    yield "message_stop", {"type": "message_stop"}


def _block_events(index: int, block: dict[str, Any], size: int) -> Iterator[tuple[str, dict[str, Any]]]:
    def delta(d: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}

    kind = block["type"]
    if kind == "text":
        head: dict[str, Any] = {"type": "text", "text": ""}
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": head}
        for piece in _chunks(block["text"], size):
            yield delta({"type": "text_delta", "text": piece})
    elif kind == "tool_use":
        head = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": head}
        for piece in _chunks(json.dumps(block["input"]), size):
            yield delta({"type": "input_json_delta", "partial_json": piece})
    elif kind == "thinking":
        head = {"type": "thinking", "thinking": "", "signature": ""}
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": head}
        for piece in _chunks(block["thinking"], size):
            yield delta({"type": "thinking_delta", "thinking": piece})
        yield delta({"type": "signature_delta", "signature": block.get("signature", "sig-fake")})
    else:
        raise ValueError(f"fake cannot stream block type {kind!r}")
    yield "content_block_stop", {"type": "content_block_stop", "index": index}


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
