"""Issue 27 traces: a scripted turn's GenAI spans, seen by an in-memory exporter, carry the right attributes and no content.

The service runs in-process on its real socket against the fake Anthropic
(real SDK, real SSE); a client plays the bridge. The model calls a tool
(``send_text_update``, whose text is content) and then answers. The exporter
sees one ``invoke_agent``, two ``chat <model>`` and one ``execute_tool``,
nested as a turn is, with the GenAI semantic-convention attributes and cache
tokens; the lane only as its hash; and no message, reply or tool text in any
attribute, name or event. With tracing off, OpenTelemetry's SDK is never
imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from clankie import settings as settings_mod
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from service import telemetry
from service.app import ServiceApp
from service.captain.lanes.keys import room_lane_key
from service.otel import OtelTracer
from tests.service.captain.harness import FakeBridge, msg, run, service_env

TRIGGER = "clankie, what did Dana say about the cake on saturday?"
UPDATE = "checking the thread about Dana's cake"
ANSWER = "Dana is bringing the lemon cake."
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    tracer = OtelTracer.to_exporter(memory)
    before = telemetry.install(tracer)
    try:
        yield memory
    finally:
        telemetry.install(before)
        tracer.shutdown()


def attributes(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


def test_a_turn_with_a_tool_call_is_one_agent_span_over_two_chats_and_a_tool(env: dict[str, str], exporter: InMemorySpanExporter) -> None:
    """invoke_agent ⊃ chat, execute_tool, chat; usage with cache tokens; the lane hashed; no content anywhere."""
    requests: list[dict[str, Any]] = []

    async def body() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.tool_use(("send_text_update", {"text": UPDATE})), fa.text(ANSWER))
            app = ServiceApp(settings_mod.load(service_env(env, fake)))
            await app.start()
            try:
                bridge = FakeBridge()
                await bridge.connect(app)
                result = await bridge.submit(msg("m1", TRIGGER))
                assert (result.outcome, result.text) == ("settled", ANSWER)
            finally:
                await app.close()
            requests.extend(fake.requests)

    run(body())
    spans = {span.name: span for span in exporter.get_finished_spans()}
    chats = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    assert sorted(spans) == sorted({"invoke_agent clankie", chats[0].name, "execute_tool send_text_update"})
    assert len(chats) == 2 and len(exporter.get_finished_spans()) == 4

    turn = spans["invoke_agent clankie"]
    lane = room_lane_key("clankie", msg("m1", TRIGGER).room)
    assert turn.kind is SpanKind.INTERNAL
    assert attributes(turn) == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": "anthropic", "gen_ai.agent.name": "clankie",
        "gen_ai.request.model": chats[0].name.removeprefix("chat "), "gen_ai.conversation.id": telemetry.lane_hash(lane),
        "clankie.delivery_id": "m1", "clankie.turn.outcome": "settled",
    }
    assert lane not in json.dumps(attributes(turn)) and len(telemetry.lane_hash(lane)) == 16

    for chat in chats:
        got = attributes(chat)
        assert chat.kind is SpanKind.CLIENT and chat.parent is not None and chat.parent.span_id == turn.context.span_id
        assert got["gen_ai.operation.name"] == "chat" and got["gen_ai.provider.name"] == "anthropic"
        assert chat.name == f"chat {got['gen_ai.request.model']}" and got["gen_ai.response.model"]
        assert got["gen_ai.usage.output_tokens"] > 0  # type: ignore[operator]
        cached = got["gen_ai.usage.cache_read.input_tokens"] + got["gen_ai.usage.cache_creation.input_tokens"]  # type: ignore[operator]
        assert got["gen_ai.usage.input_tokens"] >= cached > 0  # every input token: the cached ones and the rest
    first, second = sorted(chats, key=lambda s: s.start_time or 0)
    assert attributes(first)["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert attributes(second)["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert attributes(second)["gen_ai.usage.cache_read.input_tokens"] > 0  # type: ignore[operator]  # the second call reads the first's cache

    tool = spans["execute_tool send_text_update"]
    assert tool.parent is not None and tool.parent.span_id == turn.context.span_id
    results = [b for m in requests[1]["messages"] if isinstance(m["content"], list) for b in m["content"]
               if b.get("type") == "tool_result"]
    assert len(results) == 1  # what the model was told of the call is what the span says of it
    expected = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "send_text_update",
                "gen_ai.tool.call.id": results[0]["tool_use_id"], "gen_ai.tool.type": "function"}
    if results[0].get("is_error"):
        expected["error.type"] = "tool_error"
    assert attributes(tool) == expected

    exported = json.dumps([json.loads(s.to_json()) for s in exporter.get_finished_spans()])
    for content in (TRIGGER, UPDATE, ANSWER, "Dana", "cake", lane):
        assert content not in exported, content
    assert all(not s.events for s in exporter.get_finished_spans())  # no exception event: it could quote content


def test_a_failed_model_call_and_turn_say_their_codes_and_nothing_of_the_provider_s_message(
    env: dict[str, str], exporter: InMemorySpanExporter
) -> None:
    """A spend-limit refusal: the chat span's error.type is the failure's kind, the turn's its code; no exception is recorded."""

    async def body() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.spend_limit())
            app = ServiceApp(settings_mod.load(service_env(env, fake)))
            await app.start()
            try:
                bridge = FakeBridge()
                await bridge.connect(app)
                result = await bridge.submit(msg("m2", TRIGGER))
                assert result.outcome == "failed"
            finally:
                await app.close()
            return_code = result.code
            spans = {s.name.split(" ")[0]: s for s in exporter.get_finished_spans()}
            assert attributes(spans["invoke_agent"])["error.type"] == return_code
            assert spans["invoke_agent"].status.status_code is StatusCode.ERROR
            assert attributes(spans["chat"])["error.type"] == "usage_limit"
            assert all(not s.events for s in exporter.get_finished_spans())  # no exception event, no provider message

    run(body())


def test_with_tracing_off_the_service_never_imports_the_sdk(env: dict[str, str]) -> None:
    """No OTEL_EXPORTER_OTLP_ENDPOINT: configuring and building the service as its entry does leaves opentelemetry.sdk
    and the exporter unimported."""
    script = (
        "import sys; from clankie import settings; from service import observability; from service.app import build; "
        "s = settings.load(); observability.configure(s, {}); build(s, {}); "
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter', 'service.otel'))))"
    )
    done = subprocess.run([sys.executable, "-c", script], env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_an_endpoint_without_the_extra_is_one_clear_configuration_error(env: dict[str, str]) -> None:
    """OTEL_EXPORTER_OTLP_ENDPOINT set but no OpenTelemetry SDK: a ConfigError naming the extra (exit 78 in a child)."""
    script = (
        "import sys; sys.modules['opentelemetry.sdk'] = None; from clankie import settings; from service import telemetry; "
        "telemetry.configure(settings.load())"
    )
    done = subprocess.run([sys.executable, "-c", script], env={**env, "PYTHONPATH": str(REPO),
                                                                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode != 0 and "ConfigError" in done.stderr and "clankie[otel]" in done.stderr
