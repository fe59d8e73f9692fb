"""How tests wait (docs/testing.md), checked over tests/ with ast.

A test waits on the event it means: it polls real state (a receipt, a
status, a file) until a deadline, or advances a fake clock. A fixed sleep is
a guess about how fast a machine is, and a cold, busy one guesses wrong. So
every ``time.sleep``/``asyncio.sleep`` of a non-zero time in tests/ is either
the step of a loop that checks real state (inside a ``while``/``for``), or
says on its line why it is not a guess, with a ``# sleep:`` comment: a window
in which something must *not* happen (no event to poll for), a fixture
child's hang, a deliberately wedged loop.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _is_sleep(call: ast.Call) -> bool:
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "sleep"):
        return False
    if not (isinstance(func.value, ast.Name) and func.value.id in ("time", "asyncio")):
        return False
    zero = bool(call.args) and isinstance(call.args[0], ast.Constant) and call.args[0].value == 0
    return not zero


def unexplained_sleeps(path: Path) -> list[int]:
    """Lines of ``path`` with a fixed sleep that is neither a poll loop's step nor marked ``# sleep:``."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    found: list[int] = []

    def visit(node: ast.AST, in_loop: bool) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            in_loop = False  # a loop around a def does not make its body a poll
        if isinstance(node, ast.Call) and _is_sleep(node) and not in_loop:
            if "# sleep:" not in lines[node.lineno - 1]:
                found.append(node.lineno)
        looping = in_loop or isinstance(node, ast.While | ast.For | ast.AsyncFor)
        for child in ast.iter_child_nodes(node):
            visit(child, looping)

    visit(ast.parse(source, filename=str(path)), False)
    return found


def test_every_fixed_sleep_in_the_tests_is_a_poll_step_or_says_why() -> None:
    """No test guesses how long the machine takes: a sleep outside a poll loop carries its reason."""
    bad = [f"{path.relative_to(TESTS.parent)}:{line}" for path in sorted(TESTS.rglob("*.py"))
           for line in unexplained_sleeps(path)]
    assert bad == [], "fixed sleeps with no '# sleep:' reason (poll real state instead): " + ", ".join(bad)


def test_the_check_sees_a_guess(tmp_path: Path) -> None:
    """A bare sleep is reported; a poll step, a zero yield and a marked window are not."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import asyncio, time\n"
        "async def f(ok):\n"
        "    await asyncio.sleep(0.5)\n"
        "    while not ok():\n"
        "        await asyncio.sleep(0.05)\n"
        "    await asyncio.sleep(0)\n"
        "    time.sleep(0.3)  # sleep: a restart must not happen in this window\n"
        "    time.sleep(1)\n"
    )
    assert unexplained_sleeps(sample) == [3, 8]
