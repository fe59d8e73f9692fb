"""Issue 38: a real Prometheus scrapes a running tree and evaluates ``monitoring/alerts.yml`` as shipped.

The Debian binary runs on a loopback port with the shipped rule file (less
one ``for:``, below). Against the real tree, driven with the real
``clankiectl``:

* three ``clankiectl restart tldraw`` fire nothing: once Prometheus holds
  ``reason="operator"`` at 3 and has evaluated the rules on it, the
  restart-loop rule is inactive and no alert is pending or firing;
* five SIGKILLs of tldraw fire ``ClankieRestartLoop`` for tldraw;
* ``clankiectl doctor`` says every part is ok on the whole tree (the fake
  provider accepts the key, the Discord session is up, the endpoint answers),
  and fails the stopped service with its fix;
* ``clankiectl stop service`` fires ``ClankieChildDown{child="service"}``
  once its ``for:`` has run.

The timing is not this test's: the promtool unit tests in
``monitoring/alerts.test.yml`` pin it, and
``tests/test_observability_doc.py`` the shipped ``for:`` of a child down
(one minute at most). So that this test need not wait the minute out, it
loads the shipped file with that one line cut to :data:`CHILD_DOWN_FOR`
(:func:`rules_under_test`; the fast test beside it says nothing else
differs), and Prometheus scrapes and evaluates every half second.

The three run in one tree, the restarts and the crashes while the stopped
service's ``for:`` runs.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import shutil
import socket
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.integration.tree import REPO, Tree, real_tree
from tests.polling import until_probe

PROMETHEUS = shutil.which("prometheus")
CLANKIECTL = shutil.which("clankiectl", path=str(Path(sys.executable).parent)) or "clankiectl"
RULES = REPO / "monitoring" / "alerts.yml"
CHILD_DOWN_FOR = "5s"
"""ClankieChildDown's ``for:`` in this test (shipped: one minute)."""
CHILD_DOWN_WITHIN = 60.0
"""Seconds from ``clankiectl stop service`` to the page, with that ``for:`` (the rest is scrapes and evaluations)."""
_CHILD_DOWN_FOR_LINE = re.compile(r"(- alert: ClankieChildDown\n\s+expr: [^\n]*\n\s+for: )(\w+)\n")


def rules_under_test(shipped: str) -> str:
    """The shipped rules with ClankieChildDown's ``for:`` cut to :data:`CHILD_DOWN_FOR`, and nothing else changed."""
    rendered, n = _CHILD_DOWN_FOR_LINE.subn(rf"\g<1>{CHILD_DOWN_FOR}\n", shipped)
    assert n == 1, "ClankieChildDown has no `for:` line right after its expr in monitoring/alerts.yml"
    return rendered


def test_the_rules_under_test_are_the_shipped_ones_less_one_for() -> None:
    """Every line of the rules the live test loads is the shipped file's but ClankieChildDown's ``for:``."""
    shipped = RULES.read_text().splitlines()
    rendered = rules_under_test(RULES.read_text()).splitlines()
    assert len(rendered) == len(shipped)
    changed = [(a, b) for a, b in zip(shipped, rendered, strict=True) if a != b]
    assert [b.strip() for _, b in changed] == [f"for: {CHILD_DOWN_FOR}"]
    assert re.fullmatch(r"\s+for: \w+", changed[0][0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def api(base: str, path: str, **params: str) -> Any:
    """One Prometheus API call's ``data``, or None while it does not answer yet."""
    url = f"{base}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return json.loads(reply.read())["data"]
    except OSError:
        return None


async def ask(base: str, path: str, **params: str) -> Any:
    return await asyncio.to_thread(api, base, path, **params)


async def value(base: str, promql: str) -> float | None:
    data = await ask(base, "/api/v1/query", query=promql)
    if not data or not data["result"]:
        return None
    return sum(float(s["value"][1]) for s in data["result"])


async def alerts(base: str, name: str) -> list[dict[str, Any]]:
    data = await ask(base, "/api/v1/alerts")
    return [a for a in (data or {}).get("alerts", []) if a["labels"]["alertname"] == name]


def stamp(text: str) -> float:
    """Prometheus's RFC 3339 time (nanoseconds cut to micro) as a Unix time."""
    head, _, frac = text.rstrip("Z").partition(".")
    return dt.datetime.fromisoformat(f"{head}.{(frac or '0')[:6]}+00:00").timestamp()


async def rule(base: str, name: str) -> dict[str, Any] | None:
    data = await ask(base, "/api/v1/rules", type="alert")
    for group in (data or {}).get("groups", []):
        for r in group["rules"]:
            if r["name"] == name:
                found: dict[str, Any] = r
                return found
    return None


async def clankiectl(t: Tree, *args: str, ok: int = 0) -> str:
    """The real clankiectl against the tree; its output, once it exited ``ok``."""
    proc = await asyncio.create_subprocess_exec(CLANKIECTL, "--socket", str(t.sock), *args, env=t.env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == ok, (args, out, err)
    return out.decode()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_shipped_rules_page_for_a_stopped_child_and_a_crash_loop_and_not_for_a_deploy(tmp_path: Path,
                                                                                          runtime_dir: Path) -> None:
    assert PROMETHEUS is not None, "Debian's prometheus package: scripts/bootstrap installs it"
    port, prom_port = free_port(), free_port()
    base = f"http://127.0.0.1:{prom_port}"
    rules = tmp_path / "alerts.yml"
    rules.write_text(rules_under_test(RULES.read_text()))
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 500ms\n  scrape_timeout: 500ms\n  evaluation_interval: 500ms\n"
        f"rule_files: ['{rules}']\n"
        f"scrape_configs:\n  - job_name: clankie\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
    )

    async def main() -> None:
        env = {"CLANKIE_METRICS_LISTEN": f"127.0.0.1:{port}", "CLANKIE_DISCORD_TOOL_CARD": "false"}
        async with real_tree(tmp_path, runtime_dir, env, spares={"tldraw"}) as t:  # the child whose restarts it counts
            log = (tmp_path / "prometheus.log").open("wb")
            prom = await asyncio.create_subprocess_exec(
                PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}", stdout=log, stderr=log,
            )
            try:
                await run(t, base)
            finally:
                prom.terminate()
                await prom.wait()
                log.close()

    asyncio.run(main())


async def run(t: Tree, base: str) -> None:
    async def tree_seen() -> bool:
        up = await value(base, 'sum(clankie_child_up{job="clankie"})')
        zero = await value(base, 'clankie_child_restarts_total{child="tldraw",reason="operator"}')
        return up == 4 and zero == 0

    await until_probe(tree_seen, 60, "Prometheus to see the four children up and tldraw's restart series at 0", step=0.2)
    others = {c.name: c.spare for c in (await t.status()).children if c.name != "tldraw"}
    assert others == dict.fromkeys(("browser", "service", "bridge"), "off")  # CLANKIE_SPARES=tldraw: a host left out keeps none

    doctor = await t.doctor()  # the whole tree well: every health line ok, the key accepted, the session up
    assert doctor.ok and {h.name: h.status for h in doctor.health} == {
        **{f"child:{n}": "ok" for n in ("browser", "tldraw", "service", "bridge")},
        "metrics": "ok", "store": "ok", "provider": "ok", "discord": "ok", "journal": "ok", "budget": "ok", "disk": "ok"}

    # a dead captain: its `for:` runs while the rest is tried
    stopped_at = time.monotonic()
    await clankiectl(t, "stop", "service")
    text = await clankiectl(t, "doctor", ok=1)
    assert re.search(r"^fail +child:service +stopped .*\n +fix: clankiectl start service$", text, re.M), text
    assert re.search(r"^warn +budget +the service is not running", text, re.M), text

    # a deploy: three operator restarts in a row
    for _ in range(3):
        old = (await t.child("tldraw")).pid
        await clankiectl(t, "restart", "tldraw")
        await t.wait_child(lambda c: c.state == "running" and c.pid not in (None, old), "tldraw")  # noqa: B023

    async def three_stored() -> float | None:
        n = await value(base, 'clankie_child_restarts_total{child="tldraw",reason="operator"}')
        return time.time() if n == 3 else None

    stored_at = await until_probe(three_stored, 30, "Prometheus to store tldraw's three operator restarts", step=0.2)

    async def evaluated_since() -> dict[str, Any] | None:
        r = await rule(base, "ClankieRestartLoop")
        return r if r is not None and stamp(r["lastEvaluation"]) > stored_at + 1.0 else None

    loop_rule = await until_probe(evaluated_since, 30, "the rules evaluated on the stored restarts", step=0.2)
    assert loop_rule["state"] == "inactive" and loop_rule["health"] == "ok", loop_rule
    assert await alerts(base, "ClankieRestartLoop") == []
    assert await value(base, 'clankie_child_restarts_total{child="tldraw",reason=~"crash|watchdog|spawn_error"}') == 0

    # a crash loop
    for _ in range(5):
        await t.kill("tldraw")

    async def looping() -> list[dict[str, Any]]:
        return [a for a in await alerts(base, "ClankieRestartLoop") if a["state"] == "firing"]

    firing = await until_probe(looping, 30, "ClankieRestartLoop to fire for tldraw", step=0.2)
    assert {a["labels"]["child"] for a in firing} == {"tldraw"}, firing
    assert float(firing[0]["value"]) >= 3

    async def service_down() -> list[dict[str, Any]]:
        return [a for a in await alerts(base, "ClankieChildDown")
                if a["state"] == "firing" and a["labels"]["child"] == "service"]

    remaining = CHILD_DOWN_WITHIN - (time.monotonic() - stopped_at)
    down = await until_probe(service_down, remaining, "ClankieChildDown to fire for the stopped service", step=0.2)
    took = time.monotonic() - stopped_at
    assert down[0]["labels"]["severity"] == "page"
    print(f"ClankieChildDown fired {took:.1f}s after clankiectl stop service")  # run with -s to see the figure
