"""Ready means able to serve: after :func:`service.app.warm` a life's start and first turn import nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FIRST_TURN = """
import asyncio, json, sys, tempfile
from pathlib import Path
from service.app import ServiceApp, warm
warm()
from clankie.protocol.base import Record
records, unbuilt = [Record], []
while records:
    cls = records.pop()
    records.extend(cls.__subclasses__())
    if not cls.__pydantic_complete__:
        unbuilt.append(cls.__name__)
from clankie import settings
from clankie.testing.fake_anthropic import FakeAnthropic
from tests.service.captain.harness import FakeBridge, msg, service_env

async def main():
    d = Path(tempfile.mkdtemp())
    env = {"CLANKIE_STATE": str(d / "s"), "CLANKIE_RUNTIME_DIR": str(d / "r"), "HOME": str(d)}
    async with FakeAnthropic() as fake:
        before = set(sys.modules)
        app = ServiceApp(settings.load(service_env(env, fake)))  # what an activated spare does, then its first turn
        await app.start()
        bridge = FakeBridge()
        await bridge.connect(app)
        result = await bridge.submit(msg("m1", "hello"))
        print(json.dumps({"outcome": result.outcome, "new": sorted(set(sys.modules) - before), "unbuilt": unbuilt}))
        await app.close()

asyncio.run(main())
"""


@pytest.mark.timeout(120)
def test_the_first_turn_after_warm_imports_nothing(tmp_path: Path) -> None:
    """A fresh interpreter that ran warm() has every wire record built, and builds its app and answers its first turn
    without importing a module."""
    done = subprocess.run(
        [sys.executable, "-c", FIRST_TURN], capture_output=True, text=True, cwd=REPO, timeout=110,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"outcome": "settled", "new": [], "unbuilt": []}
