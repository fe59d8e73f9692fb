"""supervisor.health: each rule of ``clankiectl doctor``'s health check, ok/warn/fail with a fix, and the probes that
ask the world (the metrics endpoint, the provider with its key, the state directory) against real servers."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from clankie.paths import LOW_SPACE
from clankie.settings import Settings, load
from clankie.testing.fake_anthropic import FakeAnthropic
from supervisor import health
from supervisor.lifecycle import State
from supervisor.metrics import MetricsServer, registry_for
from tests.test_observability_doc import _EmptyTree


def settings(tmp_path: Path, **env: str) -> Settings:
    return load({"CLANKIE_STATE": str(tmp_path / "state"), "CLANKIE_RUNTIME_DIR": str(tmp_path / "run"), **env})


def test_every_line_that_is_not_ok_says_what_to_do_and_an_ok_line_says_nothing_to_do() -> None:
    lines = [
        health.child_line("service", State.RUNNING, "", 2, "crash"),
        health.child_line("service", State.BACKOFF, "crashed: exited 1", 3, "crash"),
        health.child_line("tldraw", State.FATAL, "restart intensity: 11 exits in 60s; last crashed: exited 1", 11, "crash"),
        health.child_line("bridge", State.FATAL, "config_error: CLANKIE_X: bad", 0, ""),
        health.child_line("browser", State.STOPPED, "stopped", 1, "operator"),
    ]
    assert [h.status for h in lines] == ["ok", "warn", "fail", "fail", "fail"]
    assert lines[0].detail == "running, 2 restarts (last: crash)" and lines[0].fix == ""
    assert "clankiectl start tldraw" in lines[2].fix and "clankiectl logs tldraw" in lines[2].fix
    assert "fix that setting" in lines[3].fix
    assert lines[4].detail == "stopped by the operator" and lines[4].fix == "clankiectl start browser"
    assert all(h.fix for h in lines if h.status != "ok")


def test_the_discord_session_and_the_journal_from_the_bridges_report() -> None:
    assert health.discord_line({"discord": "connected"}).status == "ok"
    local = health.discord_line({"discord": "disabled (no token)"})
    assert local.status == "warn" and "discord_token" in local.fix
    assert health.discord_line({"discord": "reconnecting"}).status == "fail"
    assert health.discord_line(None).status == "fail"  # the bridge is down
    assert health.discord_line(None, present=False).status == "warn"  # a tree without one
    assert health.journal_line(None, 1000) is None
    journal = health.journal_line({"journal_bytes": 100}, 1000)
    assert journal is not None and journal.status == "ok"
    near = health.journal_line({"journal_bytes": 800}, 1000)
    assert near is not None and near.status == "warn"
    refused = health.journal_line({"journal_bytes": 100, "disk": "No space left on device"}, 1000)
    assert refused is not None and refused.status == "fail"


@pytest.mark.parametrize(("report", "status"), [
    ({}, "ok"),  # no budget set
    ({"budget_tokens_left": 500, "budget_tokens_limit": 1000}, "ok"),
    ({"budget_tokens_left": 150, "budget_tokens_limit": 1000, "budget_usd_left": 4.0, "budget_usd_limit": 5.0}, "warn"),
    ({"budget_tokens_left": 900, "budget_tokens_limit": 1000, "budget_usd_left": -0.01, "budget_usd_limit": 5.0}, "fail"),
    (None, "warn"),  # the service is not running
])
def test_the_tree_budget_at_each_mark(report: dict[str, float] | None, status: str) -> None:
    got = health.budget_line(report)
    assert got.status == status, got
    if status == "fail":
        assert "clankiectl budget raise tree" in got.fix


def test_disk_space_at_each_bound(tmp_path: Path) -> None:
    assert health.disk_line(tmp_path, LOW_SPACE - 1).status == "fail"
    assert health.disk_line(tmp_path, LOW_SPACE).status == "warn"
    assert health.disk_line(tmp_path, health.DISK_WARN_BYTES - 1).status == "warn"
    assert health.disk_line(tmp_path, health.DISK_WARN_BYTES).status == "ok"
    assert health.disk_line(tmp_path, None).status == "fail"


def test_the_store_takes_a_write_or_says_why_not(tmp_path: Path) -> None:
    async def go() -> None:
        ok = await health.store_line(tmp_path)
        assert ok.status == "ok" and list(tmp_path.iterdir()) == []  # the probe file is gone
        not_a_dir = tmp_path / "file"
        not_a_dir.write_text("")
        refused = await health.store_line(not_a_dir)
        assert refused.status == "fail" and "Not a directory" in refused.detail

    asyncio.run(go())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_the_metrics_endpoint_is_scraped_as_prometheus_would() -> None:
    async def go() -> None:
        off = await health.metrics_line(None)
        assert off.status == "warn" and "monitoring/alerts.yml" in off.fix
        listen = f"127.0.0.1:{free_port()}"
        assert (await health.metrics_line(listen)).status == "fail"  # nothing answers there
        server = MetricsServer(listen, registry_for(_EmptyTree()))
        await server.start()
        try:
            got = await health.metrics_line(listen)
            assert got.status == "ok" and f"http://{listen}/metrics answers" in got.detail
        finally:
            await server.close()

    asyncio.run(go())


def test_the_provider_is_asked_with_the_key_and_a_refused_key_fails(tmp_path: Path) -> None:
    """GET /v1/models: 200 ok; 401 fail with the fix; no key fail; nothing listening warn (validity unknown)."""
    async def go() -> None:
        async with FakeAnthropic() as fake:
            good = settings(tmp_path, ANTHROPIC_API_KEY="sk-test-good-key", ANTHROPIC_BASE_URL=fake.base_url)
            assert (await health.provider_line(good)).status == "ok"
            fake.valid_keys = {"sk-test-another-key"}
            refused = await health.provider_line(good)
            assert refused.status == "fail" and "(401)" in refused.detail and "anthropic_api_key" in refused.fix
            assert "sk-test-good-key" not in refused.detail + refused.fix
        unreachable = settings(tmp_path, ANTHROPIC_API_KEY="sk-test-good-key",
                               ANTHROPIC_BASE_URL=f"http://127.0.0.1:{free_port()}")
        gone = await health.provider_line(unreachable)
        assert gone.status == "warn" and "validity is unknown" in gone.detail
        missing = await health.provider_line(settings(tmp_path))
        assert missing.status == "fail" and "captain_provider_unconfigured" in missing.detail
        assert (await health.provider_line(settings(tmp_path, CLANKIE_DEMO="true"))).status == "ok"

    asyncio.run(go())
