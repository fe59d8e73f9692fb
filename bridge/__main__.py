"""``python -m bridge``: the bridge process, through the one child skeleton (:func:`clankie.entry.run_child`).

The token is handed over and kept; settings are read before the link, and
the bridge is never a warm spare (its app opens its receipts and dials
Discord as soon as it runs).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping

# Arm the parent-death signal before the heavy imports below: a process (a warm spare above all)
# still importing when the supervisor dies must die with it, not linger holding a listening socket.
from clankie.child import arm_parent_death, make_undumpable

make_undumpable()  # it will hold a secret: its /proc/<pid>/environ and mem are closed to same-uid processes
arm_parent_death()  # this process's environment

from bridge.app import BridgeApp
from bridge.doctor import link_handler
from clankie import ipc
from clankie.entry import ChildSpec, Ready, run_child
from clankie.protocol import Heartbeat
from clankie.settings import Settings


class BridgeBody:
    """The bridge app as a child body: ``ready`` once its tasks are up, everything closed by its own ``run``."""

    def __init__(self, settings: Settings) -> None:
        self.app = BridgeApp(settings)
        self.link_handler: ipc.Handler | None = link_handler(settings.attachment_root, settings.discord_upload_limit_bytes)

    def heartbeat(self) -> Heartbeat:
        return self.app.heartbeat()

    async def prepare(self) -> None:
        """Nothing: the bridge starts when it runs."""

    async def run(self, ready: Ready) -> None:
        announce = asyncio.create_task(self._announce(ready), name="bridge-ready")
        try:
            await self.app.run()  # a ConfigError (rejected token, missing intent) leaves through here
        finally:
            announce.cancel()

    async def _announce(self, ready: Ready) -> None:
        await self.app.ready.wait()
        await ready()

    async def close(self) -> None:
        """Nothing: the app's ``run`` closed its receipts, journal and links on its way out."""


def build(settings: Settings, environ: Mapping[str, str]) -> BridgeBody:
    return BridgeBody(settings)


SPEC = ChildSpec("bridge", build, keeps_secrets=True)


def main() -> int:
    return run_child(SPEC)


if __name__ == "__main__":
    sys.exit(main())
