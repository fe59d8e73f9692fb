"""``python -m bridge``: the bridge process, through the one child skeleton (:func:`clankie.entry.run_child`).

The token is handed over and kept; settings are read before the link. A cold
bridge builds its app at once and logs in when it runs. A warm spare
(``CLANKIE_SPARE=1``, docs/supervision.md) logs in while it prepares (the
client knows ``/users/@me`` and its HTTP session is open) and parks with no
gateway socket and nothing of the live bridge's opened; once activated (the
last bridge has exited by then) it builds its app, which reads the stored
gateway session and RESUMEs it over the warm client.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping

from clankie import heap

heap.hold()  # no collector passes over the start's imports; run_child settles it once they are done

# Arm the parent-death signal before the heavy imports below: a process (a warm spare above all)
# still importing when the supervisor dies must die with it, not linger holding a listening socket.
from clankie.child import arm_parent_death, make_undumpable

make_undumpable()  # it will hold a secret: its /proc/<pid>/environ and mem are closed to same-uid processes
arm_parent_death()  # this process's environment

from bridge import discord_client as dc
from bridge.app import BridgeApp
from bridge.doctor import link_handler
from bridge.parked import log_in_parked
from clankie import ipc
from clankie.entry import ChildSpec, Ready, run_child
from clankie.handover import is_spare
from clankie.protocol import Heartbeat
from clankie.settings import Settings

TAKING_OVER = Heartbeat(detail="discord: connecting (a spare taking over)")


class BridgeBody:
    """The bridge app as a child body: ``ready`` once its tasks are up, everything closed by its own ``run``."""

    def __init__(self, settings: Settings, *, spare: bool = False) -> None:
        self.settings = settings
        self.spare = spare
        # a spare opens nothing of the live bridge's (receipts, journal, stored session) before it is activated
        self.app: BridgeApp | None = None if spare else BridgeApp(settings)
        self.warm: dc.BridgeClient | dc.ShardedBridgeClient | None = None
        self.link_handler: ipc.Handler | None = link_handler(settings.attachment_root, settings.discord_upload_limit_bytes)

    def heartbeat(self) -> Heartbeat:
        return self.app.heartbeat() if self.app is not None else TAKING_OVER

    async def prepare(self) -> None:
        """A spare logs in (no gateway socket) before it parks; a cold bridge starts when it runs."""
        if self.spare:
            self.warm = await log_in_parked(self.settings)

    async def run(self, ready: Ready) -> None:
        if self.app is None:
            self.app = BridgeApp(self.settings, warm=self.warm)
            self.warm = None
        announce = asyncio.create_task(self._announce(self.app, ready), name="bridge-ready")
        try:
            await self.app.run()  # a ConfigError (rejected token, missing intent) leaves through here
        finally:
            announce.cancel()

    async def _announce(self, app: BridgeApp, ready: Ready) -> None:
        await app.ready.wait()
        await ready()

    async def close(self) -> None:
        """A spare never activated closes its parked client; the app's ``run`` closed the rest on its way out."""
        if self.warm is not None:
            await self.warm.close()
            self.warm = None


def build(settings: Settings, environ: Mapping[str, str]) -> BridgeBody:
    return BridgeBody(settings, spare=is_spare(environ))


SPEC = ChildSpec("bridge", build, keeps_secrets=True)
"""The token is handed over and kept; a spare parks prepared (logged in), as the hosts park with Chromium up."""


def main() -> int:
    return run_child(SPEC)


if __name__ == "__main__":
    sys.exit(main())
