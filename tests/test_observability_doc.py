"""docs/observability.md's dashboard and alert rules, checked by the real tools (Debian's prometheus package).

The rules and their unit tests are the page's ``yaml alerts.yml`` and
``yaml alerts.test.yml`` blocks, written to files and run through
``promtool check rules`` and ``promtool test rules`` (every alert has a case
that fires and one that does not). Every query of the ``json dashboard.json``
block goes through ``promtool check rules`` as a recording rule, and names
only series the tree exports.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from clankie.metrics import FAMILIES

DOC = Path(__file__).resolve().parents[1] / "docs" / "observability.md"
PROMTOOL = shutil.which("promtool")
SUPERVISOR_SERIES = {"clankie_child_up", "clankie_child_restarts_total", "clankie_spare_takeovers_total",
                     "clankie_watchdog_aborts_total", "clankie_child_resident_bytes", "clankie_child_open_fds"}


def block(name: str) -> str:
    """The fenced block whose info string ends with ``name``."""
    found = re.findall(rf"^```\w+ {re.escape(name)}\n(.*?)^```$", DOC.read_text(), flags=re.S | re.M)
    assert len(found) == 1, f"one block named {name} in {DOC.name}"
    return found[0]


def promtool(*args: str, cwd: Path) -> str:
    assert PROMTOOL is not None, "Debian's prometheus package: scripts/bootstrap installs it"
    done = subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def series_in(expr: str) -> set[str]:
    return set(re.findall(r"\b(clankie_[a-z_]+?)(?:_bucket|_sum|_count)?\b(?=[\[{(\s)]|$)", expr))


def known() -> set[str]:
    return set(FAMILIES) | SUPERVISOR_SERIES


def test_the_alert_rules_pass_promtool_check_and_their_unit_tests(tmp_path: Path) -> None:
    """``promtool check rules`` and ``promtool test rules`` on the page's own blocks."""
    (tmp_path / "alerts.yml").write_text(block("alerts.yml"))
    (tmp_path / "alerts.test.yml").write_text(block("alerts.test.yml"))
    assert "SUCCESS: 11 rules found" in promtool("check", "rules", "alerts.yml", cwd=tmp_path)
    assert "SUCCESS" in promtool("test", "rules", "alerts.test.yml", cwd=tmp_path)


def test_every_alert_is_unit_tested_firing_and_silent() -> None:
    """Each alert appears in the tests with an expected alert and with none, and names only exported series."""
    rules = re.findall(r"- alert: (\w+)\n\s+expr: (.*?)\n\s+(?:for|labels):", block("alerts.yml"), flags=re.S)
    assert len(rules) == 11
    cases = re.findall(r"alertname: (\w+)\n\s+exp_alerts:(.*?)(?=\n\s+- eval_time|\n  - interval|\Z)", block("alerts.test.yml"),
                       flags=re.S)
    for name, expr in rules:
        mine = [body.strip() for alert, body in cases if alert == name]
        assert any(body != "[]" for body in mine), f"{name} never fires in a test"
        assert "[]" in mine, f"{name} is never shown silent in a test"
        assert series_in(expr) <= known(), name


def test_every_dashboard_query_parses_and_names_only_exported_series(tmp_path: Path) -> None:
    """Each panel's PromQL, as a recording rule, passes ``promtool check rules``; its clankie_ series all exist."""
    dashboard = json.loads(block("dashboard.json"))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 20
    rules = [{"record": f"clankie:panel_{i}", "expr": e.replace("$__rate_interval", "5m").replace("$job", ".*")}
             for i, e in enumerate(exprs)]
    (tmp_path / "panels.yml").write_text(json.dumps({"groups": [{"name": "panels", "rules": rules}]}))  # JSON is YAML
    assert f"SUCCESS: {len(rules)} rules found" in promtool("check", "rules", "panels.yml", cwd=tmp_path)
    used = set().union(*(series_in(e) for e in exprs))
    assert used <= known(), used - known()
    assert known() <= used, f"series no panel shows: {known() - used}"
