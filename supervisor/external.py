"""The browser host in its own unit, as ``clankiectl status`` shows it (``CLANKIE_BROWSER_HOST=external``).

The supervisor neither spawns nor watches that host (systemd does:
``docs/systemd/clankie-browser.*``), so it has no process, lifecycle or
heartbeat of it to report. What it can say is whether the socket the service
dials answers a hello now: one connection, opened and closed, under
:data:`PROBE_SECONDS`. With socket activation that connection starts the host
if it was not running, as the service's first screenshot would.
"""

from __future__ import annotations

from pathlib import Path

from clankie import ipc
from clankie.errors import ClankieError, RemoteError
from clankie.protocol import ChildStatus

PROBE_SECONDS = 3.0
STATE = "external"


async def external_status(socket: Path, timeout: float = PROBE_SECONDS) -> ChildStatus:
    """The browser's line in ``status``: state ``external``, ready when ``socket`` answers a hello in ``timeout``."""
    try:
        conn = await ipc.connect(socket, "supervisor", timeout=timeout)
    except RemoteError as exc:
        why = f"refuses us: {exc.code}"
    except (ClankieError, OSError) as exc:
        why = f"not answering ({type(exc).__name__})"
    else:
        await conn.aclose()
        return ChildStatus(name="browser", state=STATE, ready=True, detail=f"its own unit at {socket}: answers")
    return ChildStatus(name="browser", state=STATE, ready=False, detail=f"its own unit at {socket}: {why}"[:200])
