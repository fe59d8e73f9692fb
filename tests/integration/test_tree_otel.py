"""Issue 38: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES set on `clankie run` reach the service, which exports with them.

The real tree (supervisor, service, bridge, both hosts) is started with the
standard OpenTelemetry variables in the supervisor's environment, as an
operator's unit would set them, and a loopback OTLP/HTTP collector stands in
for a real one. The variables travel only through the supervisor's allowlist
(supervisor/environment.py) into the service's settings; after one turn the
collector holds the service's spans and its GenAI client metrics, both under
the operator's ``service.name`` and resource attributes, and the tree's id as
``service.instance.id``, with the schema URL of the conventions followed. So
two trees on one collector can be told apart.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from pathlib import Path

import pytest
from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from clankie.testing import fake_anthropic as fa
from tests.integration.tree import real_tree
from tests.polling import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCHEMA_URL = "https://opentelemetry.io/schemas/1.41.0"  # tests/service/semconv/gen_ai-1.41.0.json's schema_url


class Collector:
    """A loopback OTLP/HTTP collector: decodes and keeps every ``/v1/traces`` and ``/v1/metrics`` request."""

    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_post("/v1/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _traces(self, request: web.Request) -> web.Response:
        self.traces.append(ExportTraceServiceRequest.FromString(await request.read()))
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf")

    async def _metrics(self, request: web.Request) -> web.Response:
        self.metrics.append(ExportMetricsServiceRequest.FromString(await request.read()))
        return web.Response(body=ExportMetricsServiceResponse().SerializeToString(), content_type="application/x-protobuf")


def strings(attributes: Iterable[KeyValue]) -> dict[str, str]:
    return {kv.key: kv.value.string_value for kv in attributes}


def test_the_operator_s_service_name_and_resource_reach_the_exported_spans_and_metrics(
    tmp_path: Path, runtime_dir: Path
) -> None:
    """One turn on a tree started with OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES: the collector sees them on both."""

    async def body() -> None:
        collector = Collector()
        await collector.start()
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_SERVICE_NAME": "clankie-night",
               "OTEL_RESOURCE_ATTRIBUTES": "service.namespace=ops,deployment.environment.name=eu%2Cwest",
               "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_METRIC_EXPORT_INTERVAL": "200"}
        try:
            async with real_tree(tmp_path, runtime_dir, env=env, spares=False, hosts=False) as t:
                t.anthropic.script(fa.text("hello from the night shift"))
                assert (await t.ask("clankie, hello")).content == "hello from the night shift"

                def chat_spans() -> list[tuple[dict[str, str], str, str]] | None:
                    found = [(strings(rs.resource.attributes), rs.schema_url, ss.schema_url)
                             for request in collector.traces for rs in request.resource_spans
                             for ss in rs.scope_spans for span in ss.spans if span.name.startswith("chat ")]
                    return found or None

                def token_usage() -> list[tuple[dict[str, str], str, str]] | None:
                    found = [(strings(rm.resource.attributes), rm.schema_url, sm.schema_url)
                             for request in collector.metrics for rm in request.resource_metrics
                             for sm in rm.scope_metrics for metric in sm.metrics
                             if metric.name == "gen_ai.client.token.usage"]
                    return found or None

                spans = await until(chat_spans, 30, "the service's chat span at the collector")
                metrics = await until(token_usage, 30, "gen_ai.client.token.usage at the collector")
                instances = {resource["service.instance.id"] for resource, _, _ in (*spans, *metrics)}
                assert len(instances) == 1 and re.fullmatch(r"[0-9a-f]{16}", instances.pop())  # the tree's id
                for resource, resource_schema, scope_schema in (*spans, *metrics):
                    assert resource["service.name"] == "clankie-night"
                    assert resource["service.namespace"] == "ops"
                    assert resource["deployment.environment.name"] == "eu,west"
                    assert resource_schema == scope_schema == SCHEMA_URL
        finally:
            await collector.close()

    asyncio.run(body())
