"""Turns leave no files open: a real service, one room, many turns, the same descriptors after as before."""

from __future__ import annotations

import asyncio
import os
from collections import Counter

from clankie.rotation import segments
from clankie.settings import load
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from service.captain import records
from service.captain.lanes.lane_log import LaneLog
from tests.polling import until_probe
from tests.service.captain.harness import FakeBridge, msg, run, service
from tests.syncs import drained_syncs


async def _open_files() -> Counter[str]:
    """Files held open, once every sync already asked for has run (sockets and pipes left out: connections come and go).

    A sync works on a duplicate descriptor while it runs; one job per sync
    thread, all waiting for each other, start only after every job queued
    before them has ended.
    """
    await drained_syncs()
    out: Counter[str] = Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/"):
            out[target] += 1
    return out


async def _steady_files(timeout: float = 10.0) -> Counter[str]:
    """The open files once two looks 0.1 s apart agree: the baseline, with no group sync's duplicate in it."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    files = await _open_files()
    while loop.time() < end:
        await asyncio.sleep(0.1)
        again = await _open_files()
        if again == files:
            return files
        files = again
    return files


async def _settled_files(expected: Counter[str], timeout: float = 10.0) -> None:
    """Wait until the open files equal ``expected``; fail naming the difference. A group sync asked for after the
    barrier above can still hold a duplicate descriptor for a moment on a busy machine; a leak never goes."""
    files: Counter[str] = Counter()

    async def settled() -> bool:
        nonlocal files
        files = await _open_files()
        return files == expected

    def difference() -> str:
        return f"the open files to settle: extra {dict(files - expected)}, missing {dict(expected - files)}"

    await until_probe(settled, timeout, difference, step=0.05)


def test_many_turns_open_no_more_files_and_the_lane_log_rotates(env: dict[str, str]) -> None:
    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, lane_log_rotate_bytes=4096, lane_log_keep_bytes=65536) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            for n in range(60):
                fake.script(fa.text(f"reply {n} " + "x" * 200))
                result = await bridge.submit(msg(f"m{n}", f"message {n}"))
                assert result.outcome == "settled"
                if n == 9:
                    after_ten = await _steady_files()
            await _settled_files(after_ten)
            lane_log = app.captain.paths.lane_log(msg("m0", "").room)
            assert segments(lane_log)  # 60 turns of about 300 bytes rotated the 4 kB lane log
            last = LaneLog(lane_log, msg("m0", "").room, app.clock).recent()[-1]
            assert last["kind"] == "said" and last["text"].startswith("reply 59")

    try:
        run(body(), timeout=120)
    finally:
        records.configure(load(env))  # the rotation is the process's: give the next test the defaults back
