"""The Anthropic provider: the only module in Clankie that imports ``anthropic``.

It streams one call through the real SDK, reports each SDK event as a
:class:`~service.agent.model.Signal`, and turns every failure into a
classified :class:`~service.agent.failures.ProviderError`. The SDK's own
retries are off (``max_retries=0``): the agent owns retrying.

Prompt caching: the system prompt and the last tool carry a
``cache_control`` breakpoint with the request's ``prefix_ttl``, and the
request sets top-level (automatic) ``cache_control`` with its ``cache_ttl``
so the growing conversation prefix is cached too.
"""

from __future__ import annotations

import functools
import json
import logging
import ssl
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
from anthropic.types import TextDelta

from clankie.errors import ClankieError, ConfigError
from clankie.settings import Settings
from clankie.settings_routes import Route
from service.agent.content import Block
from service.agent.failures import FailureKind, ProviderError, classify_status
from service.agent.model import ModelRequest, ModelResponse, Signal
from service.agent.outcome import Usage

log = logging.getLogger(__name__)

def cache_control(ttl: str) -> dict[str, str]:
    """A breakpoint with its lifetime (``5m`` or ``1h``)."""
    return {"type": "ephemeral", "ttl": ttl}

RATE_LIMIT_PREFIX = "anthropic-ratelimit-"


class ProviderUnconfigured(ClankieError):
    """Raised when no Anthropic API key is configured (the operator's fault).

    The captain answers turns with ``captain_provider_unconfigured``.
    """


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context every client of this process uses: the one the SDK would build, built once.

    Parsing the CA bundle costs about 100 ms; a warm start pays it before it
    says ready (:func:`rehearse`), not in each new client. One process is one
    life, so nothing carries over between lives.
    """
    return httpx2.create_ssl_context()


class AnthropicProvider:
    """A :class:`~service.agent.model.Provider` over ``anthropic.AsyncAnthropic``."""

    @classmethod
    def from_settings(cls, settings: Settings) -> AnthropicProvider:
        """Build from ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL`` / ``CLANKIE_MODEL``."""
        if settings.anthropic_api_key is None:
            raise ProviderUnconfigured("no Anthropic API key configured")
        return cls(
            api_key=settings.anthropic_api_key.get_secret_value(),
            model=settings.model,
            base_url=settings.anthropic_base_url,
        )

    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        base_url: str | None = None,
        read_timeout: float = 600.0,
        cache: bool = True,
        http_client: httpx2.AsyncClient | None = None,
        client: anthropic.AsyncAnthropic | anthropic.AsyncAnthropicVertex | anthropic.AsyncAnthropicBedrock | None = None,
    ) -> None:
        self._model = model
        self._cache = cache
        self._client = client or anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            timeout=anthropic.Timeout(read_timeout, connect=5.0),
            http_client=http_client or anthropic.DefaultAsyncHttpxClient(verify=tls_context()),
        )

    @classmethod
    def for_route(cls, route: Route, secret: str | None, model: str, *, read_timeout: float = 600.0,
                  http_client: httpx2.AsyncClient | None = None) -> AnthropicProvider:
        """A fallback route's provider: the same Messages API through the anthropic SDK's client for its kind.

        ``anthropic``: another account's API key; ``vertex``: an OAuth access token (the SDK's
        ``AsyncAnthropicVertex``, ``region`` and ``project_id``); ``bedrock``: a Bedrock API key, or a JSON
        object of ``aws_access_key``, ``aws_secret_key`` and ``aws_session_token`` for SigV4, or nothing (the
        AWS default chain). The model id is the route's ``model``, else ``CLANKIE_MODEL`` (docs/providers.md).
        """
        common: dict[str, Any] = {
            "max_retries": 0,
            "timeout": anthropic.Timeout(read_timeout, connect=5.0),
            "http_client": http_client or anthropic.DefaultAsyncHttpxClient(verify=tls_context()),
        }
        client: anthropic.AsyncAnthropic | anthropic.AsyncAnthropicVertex | anthropic.AsyncAnthropicBedrock
        if route.kind == "anthropic":
            client = anthropic.AsyncAnthropic(api_key=secret, base_url=route.base_url, **common)
        elif route.kind == "vertex":
            assert route.region is not None and route.project_id is not None  # Route.check
            client = anthropic.AsyncAnthropicVertex(region=route.region, project_id=route.project_id, access_token=secret,
                                                    base_url=route.base_url, **common)
        else:
            keys = _bedrock_credentials(secret)
            client = anthropic.AsyncAnthropicBedrock(
                aws_region=route.region, base_url=route.base_url, api_key=keys.get("api_key"),
                aws_access_key=keys.get("aws_access_key"), aws_secret_key=keys.get("aws_secret_key"),
                aws_session_token=keys.get("aws_session_token"), **common)
        return cls(api_key="", model=route.model or model, client=client)

    @property
    def model(self) -> str:
        return self._model

    @property
    def server(self) -> tuple[str, int] | None:
        """The API's host and port, as the client dials them (the port its scheme's when the URL names none)."""
        url = self._client.base_url
        return url.host, url.port or (443 if url.scheme == "https" else 80)

    async def aclose(self) -> None:
        await self._client.close()

    def params(self, request: ModelRequest) -> dict[str, Any]:
        """The request body for ``request`` (cache breakpoints included)."""
        params: dict[str, Any] = {
            "model": self._model,
            "max_tokens": request.max_tokens,
            "messages": request.messages,
        }
        if request.system:
            system: dict[str, Any] = {"type": "text", "text": request.system}
            if self._cache:
                system["cache_control"] = cache_control(request.prefix_ttl)
            params["system"] = [system]
        if request.tools:
            tools = [dict(t) for t in request.tools]
            if self._cache:
                tools[-1]["cache_control"] = cache_control(request.prefix_ttl)
            params["tools"] = tools
        if self._cache:
            params["cache_control"] = cache_control(request.cache_ttl)
        return params

    async def complete(
        self, request: ModelRequest, on_signal: Callable[[Signal], None]
    ) -> ModelResponse:
        try:
            return await self._stream(request, on_signal)
        except anthropic.APIStatusError as err:
            raise _status_error(err) from None
        except (anthropic.APIConnectionError, httpx2.TransportError) as err:
            log.warning("model call: connection failure (%s)", type(err).__name__)
            raise ProviderError(FailureKind.TRANSIENT, f"{type(err).__name__}: {err}") from None
        except anthropic.AnthropicError as err:
            log.warning("model call: SDK failure (%s)", type(err).__name__)
            raise ProviderError(FailureKind.FATAL, f"{type(err).__name__}: {err}") from None
        except (ValueError, KeyError, TypeError) as err:  # a stream the SDK could not decode
            log.warning("model call: undecodable response (%s)", type(err).__name__)
            raise ProviderError(FailureKind.FATAL, type(err).__name__) from None

    async def _stream(
        self, request: ModelRequest, on_signal: Callable[[Signal], None]
    ) -> ModelResponse:
        stopped = False
        async with self._client.messages.stream(**self.params(request)) as stream:
            limits = rate_limit_headers(stream.response.headers)
            on_signal(Signal(kind="opened", rate_limits=limits))
            async for event in stream:
                if event.type == "text":
                    on_signal(Signal(kind="text", text=event.text))
                elif event.type == "content_block_delta" and isinstance(event.delta, TextDelta):
                    continue  # reported once, as the "text" helper event
                else:
                    stopped = stopped or event.type == "message_stop"
                    on_signal(Signal(kind=event.type))
            message = stream.current_message_snapshot if stopped else None
        if message is None or message.stop_reason is None:
            raise ProviderError(FailureKind.TRUNCATED, "stream ended without message_stop")
        if message.stop_reason == "model_context_window_exceeded":
            raise ProviderError(FailureKind.CONTEXT_OVERFLOW, "model_context_window_exceeded")
        usage = message.usage
        written_1h = usage.cache_creation.ephemeral_1h_input_tokens if usage.cache_creation is not None else 0
        return ModelResponse(
            content=[b for b in (_block(x) for x in message.content) if b is not None],
            stop_reason=message.stop_reason,
            usage=Usage(
                input=usage.input_tokens,
                output=usage.output_tokens,
                cache_read=usage.cache_read_input_tokens or 0,
                cache_write=usage.cache_creation_input_tokens or 0,
                cache_write_1h=written_1h,
            ),
            model=message.model,
            rate_limits=limits,
            id=message.id,
        )


def _bedrock_credentials(secret: str | None) -> dict[str, str]:
    """What ``AsyncAnthropicBedrock`` takes from a route's secret: a JSON object of AWS keys, else a Bedrock API key."""
    if secret is None:
        return {}
    if secret.lstrip().startswith("{"):
        try:
            keys = json.loads(secret)
        except ValueError:
            raise ConfigError("a bedrock route's credential is neither JSON AWS keys nor an API key") from None
        names = ("aws_access_key", "aws_secret_key", "aws_session_token")
        if not isinstance(keys, dict) or not {"aws_access_key", "aws_secret_key"} <= set(keys):
            raise ConfigError("a bedrock route's JSON credential needs aws_access_key and aws_secret_key")
        return {k: str(keys[k]) for k in names if keys.get(k)}
    return {"api_key": secret}


def _block(block: Any) -> Block | None:
    """A replayable request block for one response content block."""
    match block.type:
        case "text":
            return {"type": "text", "text": block.text}
        case "tool_use":
            return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
        case "thinking":
            return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
        case "redacted_thinking":
            return {"type": "redacted_thinking", "data": block.data}
        case _:
            return None


def _status_error(err: anthropic.APIStatusError) -> ProviderError:
    message = err.api_message or str(err)
    kind = classify_status(err.status_code, err.type, err.error_code, message)
    log.warning(
        "model call failed: status=%s type=%s error_code=%s -> %s",
        err.status_code,
        err.type,
        err.error_code,
        kind,
    )
    return ProviderError(
        kind,
        f"{err.status_code} {err.type}: {message}",
        status=err.status_code,
        error_type=err.type,
        error_code=err.error_code,
        retry_after=_retry_after(err.response.headers),
        rate_limits=rate_limit_headers(err.response.headers),
    )


def rate_limit_headers(headers: httpx2.Headers) -> dict[str, str]:
    """The ``anthropic-ratelimit-*`` headers of a response (what the governor paces by)."""
    return {k: v for k, v in headers.items() if k.startswith(RATE_LIMIT_PREFIX)}


def _retry_after(headers: httpx2.Headers) -> float | None:
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return float(value) * scale
        except ValueError:
            continue
    return None


# ---------------------------------------------------------------- rehearsal


def _sse(blocks: list[dict[str, Any]], stop_reason: str) -> bytes:
    """A minimal streamed answer, as the Messages API sends one."""
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_rehearsal", "type": "message", "role": "assistant", "model": "rehearsal", "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 0}}}),
    ]
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            ("content_block_start", {"type": "content_block_start", "index": i, "content_block": start}),
            ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": i}),
        ]
    events += [
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                           "usage": {"output_tokens": 1}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


async def rehearse() -> None:
    """One streamed text answer and one tool call through the real SDK, on an in-memory transport.

    A warm start runs this before it says ready, so the SDK's lazy imports,
    its default transport and the validators it builds on first use are all
    in place before the first real turn. No network, no settings, no state.
    """
    AnthropicProvider(api_key="rehearsal", model="rehearsal")  # the default transport (never used, never opened)
    answers = [
        _sse([{"type": "text", "text": "ok"}], "end_turn"),
        _sse([{"type": "text", "text": "ok"}, {"type": "tool_use", "id": "toolu_0", "name": "t", "input": {"a": 1}}],
             "tool_use"),
    ]

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=answers.pop(0))

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
    provider = AnthropicProvider(api_key="rehearsal", model="rehearsal", http_client=client)
    tool = {"name": "t", "description": "rehearsal", "input_schema": {"type": "object"}}
    try:
        for _ in range(2):
            await provider.complete(
                ModelRequest(system="s", messages=[{"role": "user", "content": "hi"}], tools=[tool], max_tokens=8),
                lambda signal: None,
            )
    finally:
        await provider.aclose()
