"""The service raises its soft fd limit to the hard one at start, and its heartbeat says how close it is."""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys

from clankie.testing.fake_anthropic import FakeAnthropic
from tests.service.captain.harness import run, service

PROBE = """
import json, logging, resource, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
from service import fdlimit
before = resource.getrlimit(resource.RLIMIT_NOFILE)
now = fdlimit.raise_to_hard()
print(json.dumps({"before": before, "returned": now, "after": resource.getrlimit(resource.RLIMIT_NOFILE),
                  "usage": fdlimit.usage()}))
"""


def _lowered(soft: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def test_a_lowered_soft_limit_is_raised_to_the_hard_one_and_logged() -> None:
    """Started with a soft limit of 256 under a higher hard limit, the process ends with soft == hard and says so in its log."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert hard > 256, "the test needs a hard limit above 256"
    done = subprocess.run(
        [sys.executable, "-c", PROBE], preexec_fn=lambda: _lowered(256), capture_output=True, text=True, timeout=60, check=True
    )
    out = json.loads(done.stdout)
    assert out["before"] == [256, hard]
    assert out["returned"] == [hard, hard] and out["after"] == [hard, hard]
    fds, limit = out["usage"]
    assert limit == hard and 3 <= fds < 64
    assert f"fd limit raised from 256 to the hard limit {hard}" in done.stderr


def test_an_unraisable_limit_is_left_and_reported() -> None:
    """When soft already equals hard, nothing changes and the log says the limit as it is."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE], preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (300, 300)),
        capture_output=True, text=True, timeout=60, check=True,
    )
    out = json.loads(done.stdout)
    assert out["returned"] == [300, 300] and out["after"] == [300, 300]
    assert "fd limit 300 (hard 300)" in done.stderr


def test_the_heartbeat_reports_open_fds_against_the_limit(env: dict[str, str]) -> None:
    """The service heartbeat's detail says fds N/LIMIT and its report carries both numbers, LIMIT being the soft limit."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            beat = app.heartbeat()
            match = re.search(r"fds (\d+)/(\d+)", beat.detail)
            assert match is not None, beat.detail
            assert beat.report["fd_limit"] == int(match.group(2)) == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            assert 0 < beat.report["fds"] == int(match.group(1)) < beat.report["fd_limit"]

    run(body())
