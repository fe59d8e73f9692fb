"""The real tree: `clankie run` on embedded defaults starts service, bridge, browser and tldraw."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from supervisor import ctl
from tests.supervisor.harness import pid_alive, supervisor, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def test_the_default_tree_runs_answers_clankiectl_and_leaves_no_orphans(
    tmp_path: Path, runtime_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With no token and no key all four children run; say fails as unconfigured; SIGKILL leaves nothing behind."""
    env = {"CLANKIE_HEARTBEAT_SECONDS": "2", "CLANKIE_STALL_TICK_SECONDS": "1", "CLANKIE_HEARTBEAT_TIMEOUT_SECONDS": "20"}
    with supervisor(tmp_path, runtime_dir, None, env=env, ready_timeout=60) as sup:
        names = [c.name for c in sup.status().children]
        assert sorted(names) == ["bridge", "browser", "service", "tldraw"]
        assert names[-1] == "bridge"  # started last, stopped first
        sock = ["--socket", str(sup.sock)]
        assert ctl.main([*sock, "say", "local:ops", "hello", "--json"]) == 1
        said = json.loads(capsys.readouterr().out)
        assert said["outcome"] == "failed" and said["code"] == "captain_provider_unconfigured"
        assert ctl.main([*sock, "lanes", "--json"]) == 0
        assert "lanes" in json.loads(capsys.readouterr().out)
        descendants = [p.pid for p in psutil.Process(sup.proc.pid).children(recursive=True)]
        assert len(descendants) >= 4  # the four children (Chromium starts only on the first screenshot)
        sup.proc.kill()
        sup.proc.wait()
        wait_for(lambda: not any(pid_alive(p) for p in descendants), 2.0, "every descendant gone")
