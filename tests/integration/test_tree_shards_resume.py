"""No deaf window on a sharded real tree: a SIGKILLed bridge on shards 0-1 of 2 is taken over and every shard RESUMEs.

``clankie run`` on both shards of 2 (tests/integration/test_tree_shards.py's tree) against the loopback fakes in
this process, whose gateway keeps a dead socket's session resumable and replays on RESUME. The bridge keeps its
parked spare (the default), which the supervisor hands the slot once the killed bridge is reaped.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import tempfile
from pathlib import Path

import pytest

from clankie.testing.fake_discord import FakeDiscord
from tests.integration.test_tree_resume import answered_once
from tests.integration.test_tree_shards import C0, C1, G0, G1, shard_tree
from tests.integration.tree import PERSON, Tree

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


async def say(t: Tree, text: str, n: int) -> list[str]:
    return [str((await t.discord.message(C0 if i % 2 else C1, f"clankie, {text} {i}", author_id=PERSON))["id"])
            for i in range(n)]


def test_a_sigkilled_sharded_bridge_resumes_both_shards_and_answers_the_gap_once(tmp_path: Path) -> None:
    """kill -9 of the bridge under traffic on both shards: its successor RESUMEs each shard (no IDENTIFY, no history
    read), the gap on both shards is replayed, and every message is answered once."""

    async def main() -> None:
        discord = FakeDiscord(guilds={G0: [C0], G1: [C1]}, shards=2)
        await discord.start()
        try:
            with tempfile.TemporaryDirectory(prefix="ck-", dir="/tmp") as rt:  # short: socket paths fit in 107 bytes
                runtime = Path(rt)
                runtime.chmod(0o700)
                async with shard_tree(tmp_path / "t", runtime, discord, "0-1") as t:
                    before = await say(t, "before", 4)
                    await answered_once(t, before, "the first bridge answers")
                    assert discord.identifies == 2
                    bridge = await t.child("bridge")
                    assert bridge.pid is not None
                    in_flight = await say(t, "in flight", 4)
                    os.kill(bridge.pid, signal.SIGKILL)
                    gap = await say(t, "gap", 6)
                    await t.wait_child(lambda c: c.state == "running" and c.pid not in (None, bridge.pid), "bridge")
                    await answered_once(t, [*in_flight, *gap], "the gap answered by the next bridge")
                    after = await say(t, "after", 2)
                    await answered_once(t, after, "live again")
                    starts = (discord.identifies, discord.resumes, discord.gateway.refused)
                    assert starts == (2, 2, 0), (list(discord.gateway.refusals), discord.gateway.closed_codes,
                                                 t.stderr()[-4000:])
                    assert discord.gateway.shared == 0  # the dead bridge's sockets were gone before the resumes
                    # the only recovery is the first bridge's, after its new sessions, with nothing to read
                    assert re.findall(r"recovery: (\d+) rooms read", t.stderr()) == ["0"]
        finally:
            await discord.close()

    asyncio.run(main())
