"""``clankiectl doctor``: the tree's health check, and proof that picture writers and their reader agree.

:func:`run_doctor` puts :mod:`supervisor.health`'s lines (each child, the
metrics endpoint, the provider and its key, the Discord session, the
journal, budgets, the store, disk space) beside the picture probes below.

Every child says in its link hello which attachment root it derived
(:func:`clankie.directories.discord_attachment_root`); the supervisor keeps it
per live process (``Child.attachment_root``) and ``status`` carries it.
:func:`agreement` is the pure comparison ``clankiectl status`` prints.

:func:`run_doctor` proves the path end to end: each writer host
(``browser``, ``tldraw``) writes its probe picture through its normal
artifact writer (``probe_artifact`` on the link), then the reader (the
``bridge``) resolves that ref with the very call a reply's picture goes
through (``resolve_artifact``). A pair passes only if the bridge got the
bytes *and* both processes reported the same root (the probe is
deterministic, so a stale copy under a wrong root must not pass).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from clankie.errors import ChannelBroken, ChannelClosed, RemoteError, RequestTimeout
from clankie.protocol import (
    Artifact,
    Code,
    DoctorCheck,
    DoctorReply,
    Empty,
    HealthCheck,
    Record,
    ResolveReply,
    ResolveRequest,
)
from supervisor.health import health

if TYPE_CHECKING:
    from clankie.settings import Settings
    from supervisor.process import Child

log = logging.getLogger(__name__)

WRITERS = ("browser", "tldraw")
READER = "bridge"
STEP_TIMEOUT = 15.0


def agreement(roots: Mapping[str, str | None]) -> dict[str, Any]:
    """``{"agree", "by_child"}``: agree when every child that reported a root reported the same one."""
    reported = {root for root in roots.values() if root is not None}
    return {"agree": len(reported) <= 1, "by_child": dict(roots)}


R = TypeVar("R", bound=Record)


class _Failed(Exception):
    def __init__(self, code: str) -> None:  # a Code, or a peer's code passed through
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class _Side:
    """Which end of a check a child is, and the codes that say it did not answer."""

    not_running: Code
    timeout: Code


WRITER_SIDE = _Side(Code.WRITER_NOT_RUNNING, Code.WRITER_TIMEOUT)
READER_SIDE = _Side(Code.READER_NOT_RUNNING, Code.READER_TIMEOUT)


async def _ask(child: Child, side: _Side, method: str, params: Record, expect: type[R]) -> R:
    link = child.link
    if link is None or link.closed:
        raise _Failed(side.not_running)
    try:
        return await link.request(method, params, expect=expect, timeout=STEP_TIMEOUT)
    except RemoteError as exc:
        raise _Failed(exc.code) from None
    except RequestTimeout:
        raise _Failed(side.timeout) from None
    except (ChannelBroken, ChannelClosed):
        raise _Failed(side.not_running) from None


async def check_pair(writer: Child, reader: Child) -> DoctorCheck:
    """One probe from ``writer`` resolved by ``reader``."""
    ref: str | None = None
    try:
        artifact = await _ask(writer, WRITER_SIDE, "probe_artifact", Empty(), Artifact)
        ref = artifact.ref
        resolved = await _ask(reader, READER_SIDE, "resolve_artifact", ResolveRequest(ref=ref), ResolveReply)
        code = resolved.code if not resolved.ok else None
    except _Failed as exc:
        code = exc.code
    if code is None and writer.attachment_root != reader.attachment_root:
        code = Code.ATTACHMENT_ROOT_MISMATCH
    if code is not None:
        log.warning("doctor: %s -> %s failed: %s", writer.name, reader.name, code)
    return DoctorCheck(
        writer=writer.name,
        reader=reader.name,
        ok=code is None,
        code=code,
        ref=ref,
        writer_root=writer.attachment_root,
        reader_root=reader.attachment_root,
    )


async def run_doctor(children: Mapping[str, Child], settings: Settings) -> DoctorReply:
    """The health check (:mod:`supervisor.health`) and every (writer host -> bridge) pair present in the tree.

    ok when no health line fails and every pair passes; a tree without a pair (no bridge, or no picture host)
    says so in a warning line.
    """
    reader = children.get(READER)
    writers = [children[name] for name in WRITERS if name in children]
    pairs = check_pairs(reader, writers)
    lines, checks = await asyncio.gather(health(children, settings), pairs)
    if not checks:
        lines = (*lines, HealthCheck(name="pictures", status="warn", detail="no picture host -> bridge pair in this tree",
                                     fix="run the default tree (no --spec-file, CLANKIE_HOSTS naming a host) to check the picture path"))
    ok = all(c.ok for c in checks) and not any(h.status == "fail" for h in lines)
    return DoctorReply(ok=ok, checks=checks, health=lines)


async def check_pairs(reader: Child | None, writers: list[Child]) -> tuple[DoctorCheck, ...]:
    if reader is None:
        return ()
    return tuple(await asyncio.gather(*(check_pair(w, reader) for w in writers)))
