"""Issue 37 item 1: control.sock fails closed. A process of the tree that dials from a child gone before the
supervisor looks (the supervisor SIGSTOPped meanwhile, as any same-uid process may) is refused every time.

Before, the in-tree check walked the peer's parents from /proc and read a vanished pid as "outside the tree":
the review's probe got ``status`` answered 6 times in 106, then raised the tree's budget to unlimited.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path

import pytest

from clankie.testing import fake_anthropic as fa
from tests.hardening.test_control_socket_limits import clankiectl
from tests.integration.tree import CHAN, PERSON, real_tree
from tests.polling import until
from tests.supervisor.harness import fixture, supervisor, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

PROBE = Path(__file__).with_name("control_probe.py")
TRIES = 106


def test_a_dead_peer_dialled_from_inside_the_tree_is_refused_every_time(tmp_path: Path, runtime_dir: Path) -> None:
    """106 tries from a child of the real supervisor, each connecting from a grandchild reaped while the supervisor
    is stopped: none is answered, each refused ``peer_unproven``; the live probe itself is ``peer_in_tree``; the
    operator (this test, outside the tree) is still answered."""
    out = tmp_path / "probe.jsonl"
    sock = runtime_dir / "control.sock"
    probe = {"name": "probe", "argv": ["{python}", str(PROBE), str(sock), str(out), str(TRIES)], "stop_timeout": 1.0}
    env = {"CLANKIE_HEARTBEAT_TIMEOUT_SECONDS": "600"}  # the probe does not link; it is a plain process of the tree
    with supervisor(tmp_path, runtime_dir, [fixture("svc"), probe], env=env, wait_ready=False) as sup:
        wait_for(out.exists, 150, "the probe's verdicts")
        verdicts = [json.loads(line) for line in out.read_text().splitlines()]
        dead = [v["verdict"] for v in verdicts if v["try"] != "alive"]
        alive = [v["verdict"] for v in verdicts if v["try"] == "alive"]
        assert len(dead) == TRIES
        answered = [v for v in dead if v == "answered"]
        assert not answered, f"{len(answered)} of {TRIES} dead peers were answered"
        assert all("peer_unproven" in v for v in dead), dead[:3]
        assert len(alive) == 1 and "peer_in_tree" in alive[0], alive
        done = clankiectl(sup.sock, "status", "--json")
        assert done.returncode == 0, done.stderr
        assert sup.proc.poll() is None


def verdicts(out: Path) -> tuple[list[str], list[str]]:
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return [v["verdict"] for v in lines if v["try"] != "alive"], [v["verdict"] for v in lines if v["try"] == "alive"]


def test_the_probe_run_by_a_tools_bash_in_the_real_tree_is_refused_every_time(tmp_path: Path, runtime_dir: Path) -> None:
    """The issue's attacker, deep in the real tree: a privileged turn's ``bash`` (service -> shell -> probe) holds the
    supervisor stopped and dials from a grandchild it reaps; 106 tries, none answered; the turn itself goes on."""
    out = tmp_path / "probe.jsonl"

    async def body() -> None:
        async with real_tree(tmp_path, runtime_dir, env={"CLANKIE_DISCORD_SYSTEM_ACTOR_IDS": PERSON}, spares=False, hosts=False) as t:
            assert t.proc.pid is not None
            command = shlex.join([sys.executable, str(PROBE), str(t.sock), str(out), str(TRIES), str(t.proc.pid)])
            t.anthropic.script(fa.tool_use(("bash", {"command": command})), fa.text("probed"))
            sent = await t.discord.message(CHAN, "clankie, run the probe", author_id=PERSON, mention_bot=True)
            assert (await t.reply_to(sent["id"], timeout=90)).content == "probed"
            await until(out.exists, 10, "the probe's verdicts")
            dead, alive = verdicts(out)
            assert len(dead) == TRIES and "answered" not in dead, dead
            assert all("peer_unproven" in v for v in dead), dead[:3]
            assert len(alive) == 1 and "peer_in_tree" in alive[0], alive
            assert (await t.status()).supervisor.pid == t.proc.pid  # the operator, outside the tree, still answered

    asyncio.run(asyncio.wait_for(body(), 170))
