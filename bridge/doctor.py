"""The bridge's side of ``clankiectl doctor``: resolve a probe ref exactly as a reply's picture would be.

The supervisor asks ``resolve_artifact {ref}`` over the link after a host
wrote its probe. The answer comes from :func:`bridge.delivery.resolve_media`
with the bridge's own attachment root and upload limit, the very call a
settled reply goes through, so a pass here means a picture from that host
would be attached, and a failure names the code the reply would have hit.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from bridge.delivery import resolve_media
from clankie import ipc
from clankie.protocol import ResolveReply, ResolveRequest
from clankie.router import Router

log = logging.getLogger(__name__)


def link_handler(attachment_root: Path, upload_limit: int) -> ipc.Handler:
    """The bridge's handler for the supervisor's requests on the link."""

    async def resolve(params: ResolveRequest) -> ResolveReply:
        files, failures = await asyncio.to_thread(resolve_media, attachment_root, (params.ref,), upload_limit)
        if failures:
            log.warning("doctor probe did not resolve: %s", failures[0])
            return ResolveReply(ok=False, code=failures[0])
        return ResolveReply(ok=True, size=len(files[0].data))

    return Router("child", {"resolve_artifact": resolve},
                  unserved={"abort_run", "lanes", "say", "budget", "shutdown", "activate", "peers", "probe_artifact"})
