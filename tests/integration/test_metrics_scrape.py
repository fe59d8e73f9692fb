"""Issue 27: a real Prometheus scrapes the running tree, and what it stores is what an operator is promised.

``clankie run`` with ``CLANKIE_METRICS_LISTEN`` answers one turn in a Discord
room. Its exposition passes ``promtool check metrics`` and counts that turn
(settled, its model call, its tokens by type). Then a Prometheus server (the
Debian binary, started here on a loopback port with a temporary config and
data directory) scrapes the supervisor, and its HTTP API returns every series
the issue names, with the turn counted and each child up.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from clankie.testing import fake_anthropic as fa
from tests.integration.tree import CHAN, real_tree
from tests.polling import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")

SERIES = (
    "clankie_turns_total", "clankie_turn_duration_seconds_bucket", "clankie_turn_first_words_seconds_bucket",
    "clankie_model_requests_total", "clankie_model_tokens_total", "clankie_model_request_duration_seconds_bucket",
    "clankie_ingress_messages_total", "clankie_discord_requests_total", "clankie_journal_waiting",
    "clankie_lanes_live", "clankie_lanes_on_disk",
    "clankie_child_restarts_total", "clankie_child_up", "clankie_spare_takeovers_total", "clankie_watchdog_aborts_total",
    "clankie_child_resident_bytes", "clankie_child_open_fds", "clankie_child_fatal", "clankie_build_info",
    "clankie_budget_remaining_tokens", "clankie_budget_limit_tokens",
)
"""Every series the issue names (the tree's budget ones, with a budget set)."""
BUDGET = 1_000_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as reply:
        body: bytes = reply.read()
        return body


def query(api: str, promql: str) -> list[dict[str, Any]]:
    """An instant query's result vector, or [] while Prometheus has nothing (or is not up yet)."""
    try:
        doc = json.loads(get(f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": promql})))
    except OSError:
        return []
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


def value(samples: list[dict[str, Any]]) -> float:
    return sum(float(s["value"][1]) for s in samples)


def sample(exposition: str, line_start: str) -> float:
    """The value of the one exposition line that starts with ``line_start``."""
    found = [line for line in exposition.splitlines() if line.startswith(line_start)]
    assert len(found) == 1, (line_start, found)
    return float(found[0].rsplit(" ", 1)[1])


def test_a_real_prometheus_scrapes_the_tree_and_returns_every_promised_series(tmp_path: Path, runtime_dir: Path) -> None:
    """One settled turn; promtool accepts the exposition; Prometheus's API returns every series, the turn and each child up."""
    assert PROMETHEUS is not None and PROMTOOL is not None, "Debian's prometheus package: scripts/bootstrap installs it"
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/metrics"

    async def main() -> None:
        env = {"CLANKIE_METRICS_LISTEN": f"127.0.0.1:{port}", "CLANKIE_BUDGET_DAY_TOKENS": str(BUDGET)}
        async with real_tree(tmp_path, runtime_dir, env, spares=False) as t:  # a story of series, not restarts
            t.anthropic.script(fa.text("Eight o'clock, same lobby."))
            asked = await t.discord.message(CHAN, "clankie, when is the lobby tonight?")
            reply = await t.reply_to(asked["id"])
            assert reply.content == "Eight o'clock, same lobby."

            def turn_in_exposition() -> str | None:  # the service's and the bridge's next heartbeats carry the turn
                text = get(endpoint).decode()
                seen = ('clankie_turns_total{code="",outcome="settled"} 1.0',
                        'clankie_discord_requests_total{route="POST /channels/{channel_id}/messages",status_class="2xx"}')
                return text if all(line in text for line in seen) else None

            text = await until(turn_in_exposition, 20, "the turn in the exposition, as the service and the bridge saw it")
            checked = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
            assert checked.returncode == 0, checked.stdout + checked.stderr
            assert sample(text, 'clankie_model_requests_total{result="ok",route="primary"}') == 1
            assert sample(text, 'clankie_model_tokens_total{type="output"}') > 0
            assert sample(text, 'clankie_ingress_messages_total{reason="",verdict="run"}') == 1
            assert sample(text, 'clankie_turn_duration_seconds_count') == 1
            assert sample(text, 'clankie_turn_first_words_seconds_count') == 1
            assert sample(text, 'clankie_discord_requests_total{route="POST /channels/{channel_id}/messages",status_class="2xx"}') >= 1
            assert sample(text, 'clankie_lanes_live') == 1
            assert sample(text, 'clankie_discord_connected') == 1
            assert sample(text, 'clankie_gateway_identifies_total') == 1  # one session start, no RESUME yet
            assert sample(text, 'clankie_gateway_session_starts_remaining') == 999  # GET /gateway/bot, read at the start
            assert sample(text, 'clankie_budget_limit_tokens{scope="tree"}') == BUDGET
            assert 0 < sample(text, 'clankie_budget_remaining_tokens{scope="tree"}') < BUDGET  # the turn spent some
            assert "clankie_budget_limit_usd{" not in text  # no dollar budget set: no series, and never summed with tokens
            for child in ("service", "bridge", "browser", "tldraw"):
                assert sample(text, f'clankie_child_up{{child="{child}"}}') == 1
                assert sample(text, f'clankie_child_resident_bytes{{child="{child}"}}') > 10 * 1024 * 1024

            prom_port = free_port()
            config = tmp_path / "prometheus.yml"
            config.write_text(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                f"scrape_configs:\n  - job_name: clankie\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
            )
            log = (tmp_path / "prometheus.log").open("wb")
            prom = await asyncio.create_subprocess_exec(
                PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}", stdout=log, stderr=log,
            )
            api = f"http://127.0.0.1:{prom_port}"
            try:
                def every_series() -> set[str] | None:
                    names = {s["metric"]["__name__"] for s in query(api, '{__name__=~"clankie_.+", job="clankie"}')}
                    return names if names >= set(SERIES) else None

                names = await until(every_series, 60, "Prometheus to store every promised series")
                assert names >= set(SERIES)
                assert value(query(api, 'clankie_turns_total{outcome="settled"}')) == 1
                assert value(query(api, 'sum(clankie_child_up)')) == 4
                assert value(query(api, 'up{job="clankie"}')) == 1
            finally:
                prom.terminate()
                await prom.wait()
                log.close()

    asyncio.run(main())
