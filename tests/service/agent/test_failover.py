"""Failover between model routes, through the real SDK clients against loopback fakes, on a fake clock.

The primary is ``AsyncAnthropic`` with its own key; the fallbacks are a second Anthropic account (its own key) and
Google Vertex AI (``AsyncAnthropicVertex`` with an access token, ``:streamRawPredict``). Each fake is one account:
a request with another route's key gets a 401, so a call that went the wrong way with the wrong key fails the test.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from clankie.metrics import Meter
from clankie.settings_routes import Route
from clankie.testing import fake_anthropic as fa
from clankie.testing.clock import FakeClock
from service import telemetry
from service.agent import attempts
from service.agent import routes as routes_module
from service.agent.agent import Agent
from service.agent.breaker import BASE_SECONDS
from service.agent.events import AgentEvent, RetryStart, RunEnd
from service.agent.governor import Governor
from service.agent.outcome import OutcomeKind
from service.agent.provider import AnthropicProvider
from service.agent.routes import ModelRoute, Routes
from service.agent.session import SessionTree
from service.agent.tools import Tool
from service.telemetry import ChatCall, ChatSpan, NoTracer
from tests.service.agent.helpers import SYSTEM, arun, echo_tool

MODEL = "claude-test"
VERTEX_MODEL = "claude-test@20250929"
BEDROCK_MODEL = "anthropic.claude-test-20250929-v1:0"
KEYS = {"primary": "sk-primary-0000", "backup": "sk-backup-1111", "gcp": "ya29.vertex-2222", "aws": "AKIAFAKE3333"}
SIGV4 = '{"aws_access_key": "AKIAFAKE3333", "aws_secret_key": "aws-secret-4444"}'  # the aws route signs with these


@dataclass
class Net:
    fakes: dict[str, fa.FakeAnthropic]
    routes: Routes
    agent: Agent
    session: SessionTree
    clock: FakeClock
    events: list[AgentEvent] = field(default_factory=list)

    def down(self, name: str, failure: fa.Failure | None = None) -> None:
        """Route ``name`` answers every request with ``failure`` (a 529 by default) until :meth:`up`."""
        failure = failure or fa.overloaded()
        self.fakes[name].respond_with(lambda body: failure)

    def up(self, name: str) -> None:
        self.fakes[name].respond_with(None)

    def served(self) -> dict[str, int]:
        return {name: len(fake.requests) for name, fake in self.fakes.items()}

    def errors(self) -> list[dict[str, Any]]:
        return [e["data"] for e in self.session.entries if e.get("custom_type") == "provider_error"]


@contextlib.asynccontextmanager
async def net(tmp_path: Path, kinds: Sequence[str] = ("backup",), tools: Sequence[Tool] = (),
              failover_after: float = 20.0) -> AsyncIterator[Net]:
    """The primary and the named fallbacks (``backup``: a second Anthropic account; ``gcp``: Vertex; ``aws``: Bedrock,
    SigV4-signed), an agent over them."""
    clock = FakeClock(autojump=True)
    fakes = {name: fa.FakeAnthropic(api_key=KEYS[name]) for name in ("primary", *kinds)}
    for fake in fakes.values():
        await fake.start()
    primary = AnthropicProvider(api_key=KEYS["primary"], model=MODEL, base_url=fakes["primary"].base_url)
    routes = [ModelRoute("primary", "anthropic", primary, Governor(clock, max_concurrent=8))]
    for name in kinds:
        secret = KEYS[name]
        if name == "gcp":
            route = Route(name=name, kind="vertex", model=VERTEX_MODEL, region="us-east5", project_id="proj-1",
                          base_url=fakes[name].base_url + "/v1", credential="VERTEX_TOKEN")
        elif name == "aws":
            route = Route(name=name, kind="bedrock", model=BEDROCK_MODEL, region="us-west-2", base_url=fakes[name].base_url,
                          credential="AWS_KEYS")
            secret = SIGV4
        else:
            route = Route(name=name, kind="anthropic", base_url=fakes[name].base_url, credential="BACKUP_KEY")
        routes.append(ModelRoute(name, route.kind, AnthropicProvider.for_route(route, secret, MODEL),
                                 Governor(clock, max_concurrent=8)))
    table = Routes(routes, clock, failover_after=failover_after)
    session = SessionTree.create(tmp_path / "lane", clock)
    agent = Agent(session=session, provider=primary, tools=tools, clock=clock, system_prompt=SYSTEM, routes=table)
    n = Net(fakes, table, agent, session, clock)
    agent.subscribe(n.events.append)
    try:
        yield n
    finally:
        await table.aclose()
        session.close()
        for fake in fakes.values():
            await fake.close()


def test_primary_529_moves_calls_to_the_next_route_and_back_once_it_heals(tmp_path: Path) -> None:
    """A 529 takes the primary down: the run is answered by the backup with no retry, the next run goes straight
    there; once the primary answers its probe, traffic is back on it. Nothing unusual reaches the run's events."""

    async def body() -> None:
        async with net(tmp_path) as n:
            n.down("primary")
            first = await n.agent.run("one")
            assert first.kind is OutcomeKind.OK and first.text == "echo: one"
            assert n.served() == {"primary": 1, "backup": 1}
            second = await n.agent.run("two")
            assert second.text == "echo: two" and n.served() == {"primary": 1, "backup": 2}  # not tried while down
            assert [s.state for s in n.routes.status()] == ["open", "closed"]
            n.clock.advance(BASE_SECONDS)  # its wait is over; still down: the probe fails, the run moves on
            assert (await n.agent.run("three")).text == "echo: three"
            assert n.served() == {"primary": 2, "backup": 3}
            n.up("primary")
            n.clock.advance(2 * BASE_SECONDS)  # the wait doubled after the failed probe
            assert (await n.agent.run("four")).text == "echo: four"
            assert n.served() == {"primary": 3, "backup": 3}  # the probe answered: back on the primary
            assert (await n.agent.run("five")).text == "echo: five"
            assert n.served() == {"primary": 4, "backup": 3}
            assert [s.state for s in n.routes.status()] == ["closed", "closed"]
            assert [s.calls_today for s in n.routes.status()] == [4, 3]
            assert [e for e in n.events if isinstance(e, RetryStart)] == []  # the room sees nothing unusual
            assert n.routes.failovers == 1
            history = n.fakes["backup"].requests[-1]["messages"]
            assert [m["content"] for m in history if m["role"] == "user"][-1][-1]["text"].endswith("three")

    arun(body())


def test_a_429_with_a_long_wait_fails_over_and_a_short_one_is_waited_out(tmp_path: Path) -> None:
    """A 429 naming 60 s (over CLANKIE_MODEL_FAILOVER_AFTER_SECONDS) moves the call; one naming 3 s is paced."""

    async def body() -> None:
        async with net(tmp_path, failover_after=20.0) as n:
            n.fakes["primary"].script(fa.rate_limited(retry_after=3), fa.text("paced"))
            assert (await n.agent.run("a")).text == "paced"
            assert n.served() == {"primary": 2, "backup": 0} and n.clock.slept == [3.0]
            n.fakes["primary"].script(fa.rate_limited(retry_after=60))
            assert (await n.agent.run("b")).text == "echo: b"
            assert n.served() == {"primary": 3, "backup": 1}
            status = n.routes.status()[0]
            assert status.state == "open"
            assert n.routes.primary.breaker.retry_at - n.clock.monotonic() == 60.0  # the server's wait, not ours

    arun(body())


def test_every_route_down_fails_the_run_once_with_the_primarys_cause(tmp_path: Path) -> None:
    """Primary and backup both 529: the run fails captain_model_failed once, after the retry schedule; the first
    failure recorded is the primary's 529, and no route is asked while it is down and not due its probe."""

    async def body() -> None:
        async with net(tmp_path) as n:
            n.down("primary")
            n.down("backup", fa.server_error())
            outcome = await n.agent.run("hi")
            assert outcome.kind is OutcomeKind.MODEL_FAILED
            errors = n.errors()
            assert (errors[0]["route"], errors[0]["status"], errors[0]["error_type"]) == ("primary", 529, "overloaded_error")
            assert {e["route"] for e in errors} == {"primary", "backup"}
            assert len([e for e in n.events if isinstance(e, RunEnd)]) == 1
            assert n.clock.slept == [2.0, 4.0, 8.0]  # the schedule, once, for the whole table
            assert sum(n.served().values()) <= 2 + 3 * 2  # at most one probe per route per retry

    arun(body())


def test_a_run_that_fails_over_mid_run_keeps_its_history_and_its_tool_calls(tmp_path: Path) -> None:
    """The primary answers a tool call, then goes down: the backup gets the whole history (the tool_use and its
    result) in the next call and finishes the run; the run's words do not depend on which route answered."""

    async def body() -> None:
        async with net(tmp_path, tools=[echo_tool()]) as n:
            n.fakes["primary"].script(fa.tool_use(("echo", {"text": "ping"})), fa.overloaded())
            n.fakes["backup"].script(fa.text("done after the tool"))
            outcome = await n.agent.run("use the tool")
            assert outcome.kind is OutcomeKind.OK and outcome.text == "done after the tool"
            assert n.served() == {"primary": 2, "backup": 1}
            moved = n.fakes["backup"].requests[0]
            first = n.fakes["primary"].requests[0]
            assert moved["system"] == first["system"] and moved["tools"] == first["tools"]  # same prompt, same cache
            blocks = [b for m in moved["messages"] for b in (m["content"] if isinstance(m["content"], list) else [])]
            uses = [b for b in blocks if b.get("type") == "tool_use"]
            results = [b for b in blocks if b.get("type") == "tool_result"]
            assert [u["name"] for u in uses] == ["echo"] and uses[0]["input"] == {"text": "ping"}
            assert [r["tool_use_id"] for r in results] == [uses[0]["id"]]
            assert moved["messages"] == n.fakes["primary"].requests[1]["messages"]  # the very request, rerouted

    arun(body())


def test_vertex_route_through_the_real_vertex_client_and_its_cache(tmp_path: Path) -> None:
    """Vertex as the fallback: :streamRawPredict with the route's model in the path and its token as a bearer; the
    lane's first call there pays one cache write and its second reads the prefix back (the cache is per route)."""

    async def body() -> None:
        async with net(tmp_path, kinds=("gcp",)) as n:
            n.down("primary")
            first = await n.agent.run("one")
            second = await n.agent.run("two")
            assert (first.text, second.text) == ("echo: one", "echo: two")
            vertex = n.fakes["gcp"]
            assert vertex.paths == [f"/v1/projects/proj-1/locations/us-east5/publishers/anthropic/models/"
                                    f"{VERTEX_MODEL}:streamRawPredict"] * 2
            assert all(r["model"] == VERTEX_MODEL for r in vertex.requests)  # the fake put the path's model back
            assert first.usage.cache_write > 0 and first.usage.cache_read == 0
            assert second.usage.cache_read >= first.usage.cache_write  # the whole first prefix read back
            assert n.routes.all[1].provider_name == "gcp.vertex_ai"

    arun(body())


def test_bedrock_route_through_the_real_bedrock_client_and_its_cache(tmp_path: Path) -> None:
    """Bedrock as the second fallback (Vertex down too): invoke-with-response-stream with the route's model id, AWS
    event-stream framing decoded by the SDK, SigV4 with the route's keys; its second call reads the first's cache."""

    async def body() -> None:
        async with net(tmp_path, kinds=("gcp", "aws")) as n:
            n.down("primary")
            n.down("gcp", fa.server_error())
            first = await n.agent.run("one")
            second = await n.agent.run("two")
            assert (first.text, second.text) == ("echo: one", "echo: two")
            assert n.served() == {"primary": 1, "gcp": 1, "aws": 2}
            bedrock = n.fakes["aws"]
            assert bedrock.paths == [f"/model/{BEDROCK_MODEL}/invoke-with-response-stream"] * 2
            assert first.usage.cache_write > 0 and second.usage.cache_read >= first.usage.cache_write
            assert [r.provider_name for r in n.routes.all] == ["anthropic", "gcp.vertex_ai", "aws.bedrock"]
            assert [s.state for s in n.routes.status()] == ["open", "open", "closed"]

    arun(body())


def test_a_route_with_the_wrong_key_is_refused_by_its_fake(tmp_path: Path) -> None:
    """The fakes check keys: the backup's key on the primary's account is a 401, so the tests above would see one."""

    async def body() -> None:
        async with fa.FakeAnthropic(api_key=KEYS["primary"]) as fake:
            wrong = AnthropicProvider(api_key=KEYS["backup"], model=MODEL, base_url=fake.base_url)
            clock = FakeClock(autojump=True)
            session = SessionTree.create(tmp_path / "lane", clock)
            agent = Agent(session=session, provider=wrong, tools=[], clock=clock, system_prompt=SYSTEM)
            try:
                assert (await agent.run("hi")).kind is OutcomeKind.MODEL_FAILED
                assert [e["data"]["status"] for e in session.entries if e.get("custom_type") == "provider_error"] == [401]
            finally:
                await wrong.aclose()
                session.close()

    arun(body())


class Calls(NoTracer):
    """A tracer that keeps each chat span's call (its provider name), nothing else."""

    def __init__(self) -> None:
        self.calls: list[ChatCall] = []

    @contextlib.contextmanager
    def chat(self, call: ChatCall) -> Iterator[ChatSpan]:
        self.calls.append(call)
        with super().chat(call) as span:
            yield span


def test_each_call_counts_under_its_route_and_its_span_names_the_routes_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Metrics: requests by route and result, the route's up gauge, one failover; traces: gen_ai.provider.name of
    the route the call went on (anthropic, then gcp.vertex_ai while the primary is down)."""

    async def body() -> None:
        tracer = Calls()
        before = telemetry.install(tracer)
        meter = Meter()
        meter.enabled = True
        for module in (attempts, routes_module):
            monkeypatch.setattr(module, "METER", meter)
        try:
            async with net(tmp_path, kinds=("gcp",)) as n:
                n.down("primary")
                await n.agent.run("one")
        finally:
            telemetry.install(before)
        report = meter.report()
        assert report is not None
        counters = {(name, s.labels): s.value for name, rows in report.counters.items() for s in rows}
        gauges = {(name, s.labels): s.value for name, rows in report.gauges.items() for s in rows}
        assert counters[("clankie_model_requests_total", ("primary", "transient"))] >= 1
        assert counters[("clankie_model_requests_total", ("gcp", "ok"))] >= 1
        assert counters[("clankie_model_failovers_total", ("primary",))] >= 1
        assert gauges[("clankie_model_route_up", ("primary",))] == 0.0 and gauges[("clankie_model_route_up", ("gcp",))] == 1.0
        assert [c.provider for c in tracer.calls] == ["anthropic", "gcp.vertex_ai"]

    arun(body())
