"""`python -m service` as a real process: kill -9 mid-run, restart, re-submit → exactly one outcome, cold once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from clankie import jsonl
from clankie.errors import ChannelBroken, ChannelClosed
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from tests.polling import until_probe
from tests.service.captain.harness import FakeBridge, msg, run, service_env, service_socket

REPO = Path(__file__).resolve().parents[2]


def _spawn(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "service"],
            cwd=REPO,
            env={**env, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CLANKIE_LOG_LEVEL": "INFO"},
            stdout=out,
            stderr=out,
        )


async def _connect(bridge: FakeBridge, path: Path, proc: subprocess.Popen[bytes]) -> None:
    async def connected() -> bool:
        assert proc.poll() is None, "service exited early"
        try:
            await bridge.connect(path)
        except (ChannelBroken, ChannelClosed, OSError):
            return False
        return True

    # a cold, busy machine takes a while to import the service
    await until_probe(connected, 60, "the service to accept the bridge", step=0.05)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_kill_9_mid_run_then_restart_gives_exactly_one_outcome(env: dict[str, str], runtime_dir: Path, state_dir: Path) -> None:
    """A service killed mid-run and restarted answers the re-submitted delivery once, and its lane reads cold once."""

    async def body() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.text("never arrives", stall_after=2), fa.text("answer after restart"), fa.text("warm now"))
            senv = {**service_env(env, fake), "CLANKIE_TREE_ID": "tree-1"}  # both lives in one supervised tree
            path = service_socket(runtime_dir)
            proc = _spawn(senv, state_dir / "service.log")
            try:
                bridge = FakeBridge()
                await _connect(bridge, path, proc)
                lost = bridge.start(msg("m1", "what happened?"))
                await fake.wait_for_requests(1)
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
                with pytest.raises((ChannelBroken, ChannelClosed)):
                    await lost
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
            proc = _spawn(senv, state_dir / "service.log")
            try:
                bridge = FakeBridge()
                await _connect(bridge, path, proc)
                again = await bridge.submit(msg("m1", "what happened?"))
                assert (again.outcome, again.text) == ("settled", "answer after restart")
                assert len(bridge.history_calls) == 1  # the restarted lane reads cold once
                warm = await bridge.submit(msg("m2", "and now?"))
                assert warm.text == "warm now" and len(bridge.history_calls) == 1
                assert await bridge.submit(msg("m1", "what happened?")) == again  # retained, no new turn
                assert len(fake.requests) == 3
            finally:
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(15) == 0
        evidence = jsonl.read_lines(state_dir / "captain" / "evidence.jsonl")
        m1 = [e["event"] for e in evidence if e["delivery_id"] == "m1"]
        assert m1 == ["accepted", "accepted", "settled"]  # one outcome, after one interrupted attempt
        # the owner was part of the run the kill hit, a crash in its tree: its re-acceptance says so; m2 never crashed
        assert [e.get("crashed_runs") for e in evidence if e["delivery_id"] in ("m1", "m2") and e["event"] == "accepted"] == [None, 1, None]
        said = [e for e in jsonl.read_lines(next((state_dir / "captain" / "lanes").glob("*.jsonl"))) if e["kind"] == "said"]
        assert [e["text"] for e in said] == ["answer after restart", "warm now"]

    run(body(), timeout=80)


@pytest.mark.parametrize(  # not slow since a cold start reads its settings before the warm imports: ~0.5 CPU s each
    ("name", "value"),
    [("CLANKIE_DISCORD_CONTEXT_MESSAGES", "500"), ("CLANKIE_POISON_RUNS", "0"), ("CLANKIE_DELIVERY_MAX_RETAINED", "99")],
)
def test_bad_configuration_exits_78(env: dict[str, str], state_dir: Path, name: str, value: str) -> None:
    """An invalid setting stops the service at once with status 78 and a one-line message, not a restart loop."""
    bad = {**env, name: value, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    done = subprocess.run([sys.executable, "-m", "service"], cwd=REPO, env=bad, capture_output=True, timeout=30)
    assert done.returncode == 78
    assert name.encode() in done.stderr and done.stderr.strip().count(b"\n") == 0
