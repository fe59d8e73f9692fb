"""Demo mode (`scripts/run --demo`): the built-in offline model answers locally; a real key refuses it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from service.agent.demo import DEMO_REPLY
from supervisor import ctl
from tests.supervisor.harness import supervisor

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

REPO = Path(__file__).resolve().parents[2]


def test_the_demo_tree_answers_say_and_never_uses_the_discord_token(
    tmp_path: Path, runtime_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With CLANKIE_DEMO=1 and no key, `say lobby hi` is answered as a demo, and a token in the environment is ignored."""
    env = {"CLANKIE_DEMO": "1", "DISCORD_TOKEN": "would-be-real-token",
           "CLANKIE_HEARTBEAT_SECONDS": "2", "CLANKIE_STALL_TICK_SECONDS": "1", "CLANKIE_HEARTBEAT_TIMEOUT_SECONDS": "20"}
    with supervisor(tmp_path, runtime_dir, None, env=env, ready_timeout=60) as sup:
        sock = ["--socket", str(sup.sock)]
        assert ctl.main([*sock, "say", "lobby", "hi", "--json"]) == 0
        said = json.loads(capsys.readouterr().out)
        assert said["outcome"] == "settled" and said["text"] == DEMO_REPLY and "demo" in said["text"]
        (bridge,) = [c for c in sup.status().children if c.name == "bridge"]
        assert "disabled (no token)" in bridge.detail


def test_scripts_run_demo_refuses_a_real_key_with_one_line(tmp_path: Path) -> None:
    """`./scripts/run --demo` with ANTHROPIC_API_KEY set exits 78 and says why on one line, starting nothing."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "CLANKIE_STATE": str(tmp_path / "state"),
           "CLANKIE_RUNTIME_DIR": str(tmp_path / "run"), "ANTHROPIC_API_KEY": "sk-ant-a-real-looking-key"}
    done = subprocess.run([str(REPO / "scripts/run"), "--demo"], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 78
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "demo mode refuses" in lines[0] and "ANTHROPIC_API_KEY" in lines[0]
    assert "sk-ant" not in done.stderr + done.stdout
    assert not (tmp_path / "run" / "control.sock").exists()
