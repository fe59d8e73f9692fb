"""Issue 37 item 1: every control action names its caller. On the real tree, clankiectl's budget raise (which must
now say --unlimited to lift a limit), say and abort each carry the pid and uid of the process on control.sock into
the supervisor's log and the service's evidence and spend ledger; nothing a client sends there is believed."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from clankie.protocol import BudgetRequest, Caller
from clankie.testing import fake_anthropic as fa
from supervisor import ctl
from tests.integration.tree import Tree, real_tree
from tests.polling import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def clankiectl(t: Tree, *args: str) -> tuple[int, str]:
    out = io.StringIO()

    def call() -> int:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            return ctl.main(["--socket", str(t.sock), *args])

    code = await asyncio.to_thread(call)
    return code, out.getvalue()


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for p in sorted(path.parent.glob(path.name)) for line in p.read_text().splitlines()]


def test_budget_say_and_abort_name_their_caller_and_unlimited_is_said(tmp_path: Path, runtime_dir: Path) -> None:
    """This test process is the operator: its pid and uid are in the evidence of budget_raise, abort and say, in the
    ledger's raise line and in the supervisor's log; a forged caller on the wire is replaced; --tokens 0 is a usage
    error, and --unlimited lifts the limit."""
    me = {"caller_pid": os.getpid(), "caller_uid": os.getuid()}

    async def body() -> None:
        async with real_tree(tmp_path, runtime_dir, env={"CLANKIE_BUDGET_DAY_TOKENS": "1000"}, spares=False, hosts=False) as t:
            code, said = await clankiectl(t, "budget", "raise", "tree", "--tokens", "0")
            assert code == 2 and "--tokens" in said  # 0 no longer means "no limit"
            code, said = await clankiectl(t, "budget", "raise", "tree")
            assert code == 2 and "--unlimited" in said
            code, said = await clankiectl(t, "budget", "raise", "tree", "--unlimited", "--json")
            assert code == 0, said
            tree = json.loads(said)["budgets"][0]
            assert tree["key"] == "tree" and tree["tokens_left"] is None and tree["usd_left"] is None

            forged = BudgetRequest(action="raise", key="tree", tokens=5000, caller=Caller(pid=1, uid=4242))
            await t.call("budget", forged)  # a client's own caller is overwritten by the supervisor

            t.anthropic.script(fa.text("said"))
            code, said = await clankiectl(t, "say", "lobby", "hello")
            assert code == 0, said
            code, said = await clankiectl(t, "abort", "local:lobby")
            assert code == 1  # no live run to abort: still audited

            evidence = lines(t.state / "captain" / "evidence.jsonl")
            raises = [e for e in evidence if e["event"] == "budget_raise"]
            assert [e.get("cause") for e in raises] == ["unlimited", "tokens=5000 usd=0"]
            assert all({k: e.get(k) for k in me} == me for e in raises), raises
            for event in ("operator_say", "abort"):
                got = [e for e in evidence if e["event"] == event]
                assert len(got) == 1 and {k: got[0].get(k) for k in me} == me, (event, got)
            ledger = lines(t.state / "captain" / "spend" / "*.jsonl")
            moves = [e for e in ledger if e.get("kind") == "raise"]
            assert len(moves) == 2 and all({k: e.get(k) for k in me} == me for e in moves), moves
            mine = f"by pid {os.getpid()} uid {os.getuid()}"
            await until(lambda: t.stderr().count(mine) >= 4, 15, "the supervisor's audit lines")
            log = t.stderr()
            assert f"control: budget raise tree {mine}" in log and f"control: say lobby {mine}" in log
            assert f"control: abort local:lobby {mine}" in log and "uid 4242" not in log

    asyncio.run(asyncio.wait_for(body(), 170))
