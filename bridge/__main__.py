"""``python -m bridge``: load settings, link to the supervisor, run until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

# Arm the parent-death signal before the heavy imports below: a process (a warm spare above all)
# still importing when the supervisor dies must die with it, not linger holding a listening socket.
from clankie.child import arm_parent_death

arm_parent_death()  # this process's environment

from bridge.app import BridgeApp
from bridge.doctor import link_handler
from clankie.errors import EX_CONFIG, ConfigError
from clankie.link import supervisor_link
from clankie.logs import configure
from clankie.paths import process_environment
from clankie.secrets import receive as receive_secrets
from clankie.settings import Settings, load


async def run(settings: Settings) -> int:
    app = BridgeApp(settings)
    handler = link_handler(settings.attachment_root, settings.discord_upload_limit_bytes)
    async with supervisor_link("bridge", handler, app.heartbeat, interval=settings.heartbeat_seconds) as link:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, link.request_shutdown, sig.name)
        body = asyncio.create_task(app.run(), name="bridge")
        stop = asyncio.create_task(link.shutdown.wait(), name="stop")
        ready = asyncio.create_task(app.ready.wait(), name="ready")
        await asyncio.wait({body, ready}, return_when=asyncio.FIRST_COMPLETED)
        if ready.done():
            await link.ready()
        await asyncio.wait({body, stop}, return_when=asyncio.FIRST_COMPLETED)
        for task in (stop, ready):
            task.cancel()
        if body.done():
            body.result()  # a ConfigError leaves through here
            return 1
        await link.stopping(link.shutdown_reason)
        body.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await body
    return 0


def main() -> int:
    arm_parent_death()
    try:
        settings = load(receive_secrets(process_environment()))  # the token arrives on a pipe, never in our environment
    except ConfigError as exc:
        print(f"bridge: {exc}", file=sys.stderr)
        return EX_CONFIG
    configure("bridge", settings.log_level)
    try:
        return asyncio.run(run(settings))
    except ConfigError as exc:
        print(f"bridge: {exc}", file=sys.stderr)
        return EX_CONFIG
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
