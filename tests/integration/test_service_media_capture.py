"""Media capture ownership across a steer, over real sockets (§9 #8).

The capture holds the last run's media after it ends; the next owner's start
clears it; media made mid-run survives a steer; a steerer never resets it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from clankie import artifacts, ipc
from clankie.paths import socket_path
from clankie.protocol import Artifact, Record, ScreenshotRequest
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from tests.polling import until
from tests.service.captain.harness import FakeBridge, msg, run, service

ROOM = "discord:clankie:discord:1:2"


def test_media_capture_is_owned_by_the_run_and_survives_a_steer(env: dict[str, str], runtime_dir: Path) -> None:
    """m1's screenshot rides with m1 and stays in the capture; m2's start clears it (m2 has none);
    m3's screenshot, taken before m4 steers in, rides with m3's reply: m4 did not reset it."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            root = app.settings.attachment_root
            pictures = iter([b"first-shot", b"second-shot"])

            async def browser(conn: ipc.Connection, method: str, params: Record) -> Record:
                assert isinstance(params, ScreenshotRequest)
                png = bytes.fromhex("89504e470d0a1a0a") + next(pictures)
                ref = artifacts.write_artifact(root, "browser", png, "png")
                return Artifact(ref=ref, sha256=ref.split(":")[1], size=len(png), mime="image/png")

            host = await ipc.serve(socket_path(runtime_dir, "browser"), "browser", browser)
            try:
                assert app.browser is not None
                app.browser._next_try = 0.0  # dial now, whatever an earlier failed dial scheduled
                bridge = FakeBridge()
                await bridge.connect(app)

                fake.script(fa.tool_use(("browser_screenshot", {"url": "https://example.org"})), fa.text("here"))
                r1 = await bridge.submit(msg("m1", "clankie show me"))
                assert r1.outcome == "settled" and len(r1.media) == 1
                lane = app.captain.lanes[ROOM]
                assert list(lane.capture.media)[-1:] == list(r1.media)  # the ended run's media is still held

                fake.script(fa.text("nothing to show"))
                r2 = await bridge.submit(msg("m2", "clankie and now?"))
                assert (r2.outcome, r2.media) == ("settled", ())  # the owner's start cleared m1's media

                gate = asyncio.Event()
                fake.script(
                    fa.tool_use(("browser_screenshot", {"url": "https://example.org/2"})),
                    fa.text("looking at it", stall_after=3, stall_until=gate),
                    fa.text("that is the second one"),
                )
                t3 = bridge.start(msg("m3", "clankie another"))
                await fake.wait_for_requests(5)  # m3's screenshot is taken; its next call streams, held
                assert len(lane.capture.media) == 1
                shot = lane.capture.media[-1]
                t4 = bridge.start(msg("m4", "wait, which one?"))
                await until(lambda: len(app.captain.lanes[ROOM].machine.steerers) == 1)
                gate.set()
                r3, r4 = await asyncio.gather(t3, t4)
                assert (r3.outcome, r3.text) == ("settled", "that is the second one")
                assert r3.media == (shot,) and shot not in r1.media  # made mid-run, kept across the steer
                assert (r4.outcome, r4.media) == ("absorbed", ())  # the steerer owns no media
                assert len(fake.requests) == 6
            finally:
                await host.close()

    run(body())
