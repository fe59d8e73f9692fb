"""The shipped monitoring files, checked by the real tools (Debian's prometheus package), and the page that links them.

``monitoring/alerts.yml`` passes ``promtool check rules`` and its unit tests
``monitoring/alerts.test.yml`` pass ``promtool test rules``, as an operator
loads them; every alert has a case that fires and one that stays silent.
Every query of ``monitoring/dashboard.json`` goes through ``promtool check
rules`` as a recording rule, names only series the tree exports, and selects
by the dashboard's ``$job`` (two trees are never summed together).
``docs/observability.md`` links the three files and holds no second copy of
them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from clankie.metrics import FAMILIES
from supervisor.metrics import MeteredChild, registry_for

ROOT = Path(__file__).resolve().parents[1]
MONITORING = ROOT / "monitoring"
DOC = ROOT / "docs" / "observability.md"
PROMTOOL = shutil.which("promtool")
JOB = 'job=~"$job"'


@dataclass
class _EmptyTree:
    watchdog_aborts: int = 0

    @property
    def children(self) -> Mapping[str, MeteredChild]:
        return {}

    @property
    def order(self) -> Sequence[str]:
        return ()


def supervisor_series() -> set[str]:
    """What the supervisor exports, read from its collector (not a list kept here); a counter by its ``_total`` name."""
    metrics = registry_for(_EmptyTree()).collect()
    return {m.name + "_total" if m.type == "counter" else m.name for m in metrics if m.name.startswith("clankie_")}


def known() -> set[str]:
    return set(FAMILIES) | supervisor_series()


def promtool(*args: str, cwd: Path) -> str:
    assert PROMTOOL is not None, "Debian's prometheus package: scripts/bootstrap installs it"
    done = subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def series_in(expr: str) -> set[str]:
    """The families an expression reads: a histogram's ``_bucket``/``_sum``/``_count`` as its family's name."""
    names = known()
    out = set()
    for token in re.findall(r"\b(clankie_[a-z_]+)\b(?=[\[{(\s)]|$)", expr):
        family = re.sub(r"_(bucket|sum|count)$", "", token)
        out.add(family if token not in names and family in names else token)
    return out


def uncommented(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def rules() -> list[tuple[str, str]]:
    """(alert, expr) for every rule of the shipped file."""
    found = re.findall(r"- alert: (\w+)\n\s+expr: (.*?)\n\s+(?:for|labels):", uncommented((MONITORING / "alerts.yml").read_text()),
                       flags=re.S)
    return [(name, expr) for name, expr in found]


def cases() -> list[tuple[str, str]]:
    """(alert, expected alerts) for every case of the shipped unit tests; ``[]`` is a case where it stays silent."""
    found = re.findall(r"alertname: (\w+)\n\s+exp_alerts:(.*?)(?=\n\s+- eval_time|\n  - interval|\Z)",
                       uncommented((MONITORING / "alerts.test.yml").read_text()), flags=re.S)
    return [(name, body.strip()) for name, body in found]


def test_the_alert_rules_pass_promtool_check_and_their_unit_tests() -> None:
    """``promtool check rules`` and ``promtool test rules`` on the files as shipped, in their own directory."""
    assert f"SUCCESS: {len(rules())} rules found" in promtool("check", "rules", "alerts.yml", cwd=MONITORING)
    assert "SUCCESS" in promtool("test", "rules", "alerts.test.yml", cwd=MONITORING)


def test_every_alert_is_unit_tested_firing_and_silent() -> None:
    """Each alert appears in the tests with an expected alert and with none, and names only exported series."""
    shipped = rules()
    assert {"ClankieChildDown", "ClankieChildFatal", "ClankieRestartLoop", "ClankieProviderFailures"} <= {n for n, _ in shipped}
    tested = cases()
    assert {n for n, _ in tested} <= {n for n, _ in shipped}, "a test names an alert the file does not have"
    for name, expr in shipped:
        mine = [body for alert, body in tested if alert == name]
        assert any(body != "[]" for body in mine), f"{name} never fires in a test"
        assert "[]" in mine, f"{name} is never shown silent in a test"
        assert series_in(expr) <= known(), (name, series_in(expr) - known())


def test_the_restart_loop_counts_crashes_only_and_a_child_down_pages_within_a_minute() -> None:
    """What issue 38 asks of the rules themselves: operator restarts are left out, `for:` of a child down is 1m at most,
    fatal pages at once, and every ratio alert has a minimum-traffic guard."""
    text = uncommented((MONITORING / "alerts.yml").read_text())
    blocks = dict(re.findall(r"- alert: (\w+)\n(.*?)(?=\n\s+- alert:|\Z)", text, flags=re.S))
    assert 'reason=~"crash|watchdog|spawn_error"' in blocks["ClankieRestartLoop"]
    assert re.search(r"^\s+for: (1m|[1-5]?\ds)$", blocks["ClankieChildDown"], flags=re.M)
    assert "for:" not in blocks["ClankieChildFatal"]
    for name, block in blocks.items():
        if re.search(r"\)\s*/\s*sum", block):  # a ratio of two rates
            assert re.search(r"and sum(?: by \([^)]*\) )?\(increase\(clankie_\w+_total[^)]*\[\w+\]\)\) >= \d+", block), name


def test_every_dashboard_query_parses_uses_job_and_names_only_exported_series(tmp_path: Path) -> None:
    """Each panel's PromQL, as a recording rule, passes ``promtool check rules``; every selector has ``$job``;
    its clankie_ series all exist and every exported series has a panel."""
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["job"]
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 20
    for expr in exprs:
        selectors = re.findall(r"\b((?:clankie|process)_[a-z_]+)(\{[^}]*\})?", expr)
        assert selectors, expr
        for name, labels in selectors:
            assert JOB in labels, f"{name} without {JOB} in {expr}"
    rules = [{"record": f"clankie:panel_{i}", "expr": e.replace("$__rate_interval", "5m").replace("$job", ".*")}
             for i, e in enumerate(exprs)]
    (tmp_path / "panels.yml").write_text(json.dumps({"groups": [{"name": "panels", "rules": rules}]}))  # JSON is YAML
    assert f"SUCCESS: {len(rules)} rules found" in promtool("check", "rules", "panels.yml", cwd=tmp_path)
    used = set().union(*(series_in(e) for e in exprs))
    assert used <= known(), used - known()
    assert known() <= used, f"series no panel shows: {known() - used}"


def test_the_page_links_the_files_and_holds_no_second_copy() -> None:
    """docs/observability.md points at the three files; no rule, test case or panel is copied into it."""
    page = DOC.read_text()
    for name in ("alerts.yml", "alerts.test.yml", "dashboard.json"):
        assert f"(../monitoring/{name})" in page, name
    assert "- alert:" not in page and "alert_rule_test" not in page and '"panels"' not in page
    assert not re.search(r"^```\w* (alerts|dashboard)", page, flags=re.M)


def test_the_pages_table_of_alerts_names_each_alert_once_with_its_for() -> None:
    """The page describes each alert (a table, not a copy): every alert of the file, each with the file's ``for:``."""
    text = uncommented((MONITORING / "alerts.yml").read_text())
    shipped = {name: (found.group(1) if (found := re.search(r"^\s+for: (\S+)$", block, re.M)) else None)
               for name, block in re.findall(r"- alert: (\w+)\n(.*?)(?=\n\s+- alert:|\Z)", text, flags=re.S)}
    rows = re.findall(r"^\| (`Clankie\w+`(?:, `Clankie\w+`)*) \|.*\| ([^|]+) \|$", DOC.read_text(), flags=re.M)
    described: dict[str, str | None] = {}
    for names, for_ in rows:
        for name in re.findall(r"`(\w+)`", names):
            assert name not in described, name
            described[name] = None if for_.strip().startswith("none") else for_.strip()
    assert described == shipped
