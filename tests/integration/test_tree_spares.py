"""Which real trees keep their warm spares: every tree test that kills, restarts, crashes, stalls or hangs a child
(or the supervisor), or looks at a spare or the hand-over, boots the default tree (``real_tree(..., spares=True)``);
the others boot without spares (``tests/integration/tree.py``, docs/benchmarks.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ABOUT_A_CHILD_S_LIFE = re.compile(r"kill|SIGSTOP|SIGKILL|restart|crash|stall|hang|hung|spare|hand.?over|respawn", re.I)


def tree_calls(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Call]:
    return [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "real_tree"]


def keeps_spares(call: ast.Call) -> bool:
    return any(k.arg == "spares" and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords)


def tree_tests() -> list[tuple[str, str, list[ast.Call]]]:
    """(file, test, its real_tree calls) for every test function that boots a real tree."""
    found = []
    for path in sorted(TESTS.rglob("test_*.py")):
        source = path.read_text()
        if "real_tree(" not in source:
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
                body = re.sub(r"spares=\w+", "", ast.get_source_segment(source, node) or "")  # what it does, not what it asks
                calls = [c for fn in ast.walk(node) if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) for c in tree_calls(fn)]
                if calls:
                    found.append((str(path.relative_to(TESTS)), body, calls))
    return found


def test_every_tree_test_that_kills_or_restarts_a_child_keeps_the_spares() -> None:
    trees = tree_tests()
    assert len(trees) >= 30, f"only {len(trees)} tree tests found: is the harness still real_tree?"
    missing = [
        f"{path}: {body.splitlines()[0].strip()}"
        for path, body, calls in trees
        if ABOUT_A_CHILD_S_LIFE.search(body) and not all(keeps_spares(c) for c in calls)
    ]
    assert not missing, "tree tests about a child's life that boot without spares:\n" + "\n".join(missing)


def test_trees_without_spares_are_the_rule_and_one_plain_traffic_test_keeps_the_default() -> None:
    """Spares are asked for by what a test proves, not left on everywhere; the demo's hosts test (traffic through
    the real hosts, no child's life in it) still runs the default tree."""
    trees = tree_tests()
    without = [path for path, _, calls in trees if not any(keeps_spares(c) for c in calls)]
    assert len(without) >= 10, without
    demo = [body for path, body, calls in trees if path.endswith("test_demo.py") and any(keeps_spares(c) for c in calls)]
    assert len(demo) == 1 and not ABOUT_A_CHILD_S_LIFE.search(demo[0])
