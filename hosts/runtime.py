"""The shared host runtime: one process shell for the browser and tldraw hosts.

A host is an object that satisfies :class:`Host` (its methods and their
deadlines, a request handler, a health report). :func:`main` gives it a
process: arm parent-death, connect the link, load settings (a bad value
exits 78), configure logging, start the host (launch Chromium), then, in a
warm spare, park until the supervisor activates it: a host keeps no state
of its own between requests, so its spare prepares everything but the
socket. Then serve its socket (the one the supervisor handed down, or
``<runtime>/<name>.sock`` bound here with the hand-over off) with
the hello handshake, tell the supervisor ``ready`` over the inherited link
(:func:`clankie.link.supervisor_link`) whose heartbeats carry the host's
health, then run until ``shutdown`` or SIGTERM/SIGINT and close cleanly.

Every request runs under its method's deadline. Whatever goes wrong inside
becomes a refusal (:class:`~clankie.errors.RemoteError` with a stable code)
for that caller only; the process keeps serving everyone else:

* the host's own refusals pass through (``browser_url_refused``, ...);
* the deadline running out becomes the host's ``timeout_code``;
* an unexpected exception is logged and answered ``host_internal_error``.

:func:`write_artifact` stores bytes under the attachment root (ARCHITECTURE
§6) and returns the :class:`~clankie.protocol.Artifact` record callers get.
Over the supervisor link a host also answers ``probe_artifact``: it writes
the doctor's probe picture (:mod:`hosts.probe`) through that same writer.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import signal
import sys
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any, Protocol

from clankie import artifacts, ipc, logs, paths
from clankie import settings as settings_mod
from clankie.child import arm_parent_death
from clankie.clock import Clock, SystemClock
from clankie.errors import EX_CONFIG, ConfigError, RemoteError
from clankie.handover import inherited_listener
from clankie.link import Link, supervisor_link
from clankie.protocol import Artifact, Code, Empty, Heartbeat, Record
from clankie.router import Router
from clankie.secrets import SECRET_VARIABLES
from hosts.probe import probe_png

log = logging.getLogger(__name__)


class Host(Protocol):
    """What a host process provides to the runtime."""

    name: str  # "browser" or "tldraw": the socket name and the log role
    deadlines: Mapping[str, float]  # method -> seconds
    timeout_code: str

    async def start(self) -> None:
        """Prepare (may be slow); the socket opens only after this returns."""

    async def handle(self, method: str, params: Record) -> Record:
        """Serve one request or raise :class:`RemoteError`."""

    def health(self) -> dict[str, Any]:
        """A small, content-free report for the heartbeat."""

    def detail(self) -> str:
        """One short line for ``clankiectl status``."""

    async def close(self) -> None:
        """Release everything; called once, after the socket is closed."""


HostFactory = Callable[[settings_mod.Settings, Clock], Host]


class Counters:
    """Requests served and refused, by code; part of every heartbeat."""

    def __init__(self) -> None:
        self.inflight = 0
        self.served = 0
        self.refused: collections.Counter[str] = collections.Counter()

    def report(self) -> dict[str, Any]:
        return {"inflight": self.inflight, "served": self.served, "refused": dict(self.refused)}


class HostRuntime:
    """Serves one :class:`Host` on its socket; see the module docstring."""

    def __init__(
        self, host: Host, settings: settings_mod.Settings, clock: Clock, environ: Mapping[str, str] | None = None
    ) -> None:
        self.host = host
        self.settings = settings
        self.clock = clock
        self.environ = environ if environ is not None else {}
        self.counters = Counters()
        self.server: ipc.Server | None = None

    async def handler(self, conn: ipc.Connection, method: str, params: Record) -> Record | None:
        deadline = self.host.deadlines.get(method)
        if deadline is None:
            raise RemoteError(Code.METHOD_NOT_FOUND, f"{self.host.name} does not serve {method[:64]!r}")
        self.counters.inflight += 1
        try:
            async with asyncio.timeout(deadline) as scope:
                result = await self.host.handle(method, params)
        except RemoteError as exc:
            self.counters.refused[exc.code] += 1
            raise
        except TimeoutError:
            if not scope.expired():
                raise self._internal(method) from None
            self.counters.refused[self.host.timeout_code] += 1
            log.warning("%s exceeded its %.0fs deadline", method, deadline)
            raise RemoteError(self.host.timeout_code, f"{method} took longer than {deadline:.0f}s") from None
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s failed unexpectedly", method)
            raise self._internal(method) from None
        finally:
            self.counters.inflight -= 1
        self.counters.served += 1
        return result

    def _internal(self, method: str) -> RemoteError:
        self.counters.refused[Code.HOST_INTERNAL_ERROR] += 1
        return RemoteError(Code.HOST_INTERNAL_ERROR, f"{self.host.name} failed on {method}; see its log")

    @functools.cached_property
    def link_handler(self) -> Router:
        """The supervisor's requests over the link: ``probe_artifact`` for ``clankiectl doctor``."""
        return Router("child", {"probe_artifact": self._probe_artifact},
                      unserved={"abort_run", "lanes", "say", "shutdown", "activate", "resolve_artifact"})

    async def _probe_artifact(self, params: Empty) -> Artifact:
        sub = self.host.name if self.host.name in artifacts.SUBDIRS else "generated"
        artifact = await write_artifact(self.settings.attachment_root, sub, probe_png(self.host.name), "png")
        log.info("wrote the doctor probe %s", artifact.ref)
        return artifact

    def health(self) -> dict[str, Any]:
        return {
            "attachment_root": str(self.settings.attachment_root),
            **self.counters.report(),
            **self.host.health(),
        }

    async def serve(self) -> None:
        path = paths.socket_path(self.settings.runtime_dir, self.host.name)
        paths.ensure_private_dir(self.settings.runtime_dir)
        listener = inherited_listener(self.host.name, self.environ)
        self.server = await ipc.serve(
            path, self.host.name, self.handler, max_frame=self.settings.max_frame_bytes, sock=listener,
            limits=ipc.Limits(hello_timeout=self.settings.ipc_hello_seconds),
        )
        log.info("serving on %s", path)

    async def run(self, link: Link) -> None:
        """Start, serve, say ready, and wait for ``shutdown``/SIGTERM; always close what was opened."""
        try:
            await asyncio.wait_for(self.host.start(), 60)
            if not await link.activation():  # a spare parks here, its host started, until it is the child
                return
            await self.serve()
            await link.ready()
            await link.shutdown.wait()
            log.info("stopping (%s)", link.shutdown_reason or "asked")
        finally:
            if self.server is not None:
                await self.server.close()
            await self.host.close()

    def heartbeat(self) -> Heartbeat:
        return Heartbeat(detail=self.host.detail()[:200], report=self.health())


async def write_artifact(root: Path, sub: str, data: bytes, ext: str, extra_refs: tuple[str, ...] = ()) -> Artifact:
    """Store ``data`` as a governed artifact and describe it; a failed write is ``artifact_write_failed``."""
    try:
        ref = await asyncio.to_thread(artifacts.write_artifact, root, sub, data, ext)
    except OSError as exc:
        log.error("cannot write a %s artifact under the attachment root: %s", sub, exc.strerror)
        raise RemoteError(Code.ARTIFACT_WRITE_FAILED, "the artifact could not be written") from None
    except ConfigError as exc:  # the root is not ours and private: refused, and left as it is
        log.error("not writing a %s artifact: %s", sub, exc)
        raise RemoteError(Code.ARTIFACT_WRITE_FAILED, "the attachment root is not usable") from None
    digest, _sub, _ext = artifacts.parse_ref(ref)
    return Artifact(ref=ref, sha256=digest, size=len(data), mime=artifacts.EXTENSIONS[ext], extra_refs=extra_refs)


def drop_secrets(environ: Mapping[str, str]) -> None:
    """A host needs no secret: remove any from the environment Chromium, Node and the rasterizer inherit.

    Under the supervisor there is none to remove (it hands hosts an
    allowlisted environment); this covers a host started by hand.
    """
    if isinstance(environ, MutableMapping):
        for name in SECRET_VARIABLES:
            environ.pop(name, None)


async def _amain(factory: HostFactory, name: str, environ: Mapping[str, str]) -> int:
    async with supervisor_link(name, env=environ) as link:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, link.request_shutdown, signal.Signals(sig).name)
        try:
            settings = settings_mod.load(environ)  # read once, for this life (a spare's life starts at spawn)
            logs.configure(name, settings.log_level)
            clock = SystemClock()
            runtime = HostRuntime(factory(settings, clock), settings, clock, environ)
            link.attach(runtime.link_handler, runtime.heartbeat, settings.heartbeat_seconds)
            await runtime.run(link)
        except ConfigError as exc:
            print(f"{name}: {exc}", file=sys.stderr, flush=True)
            return EX_CONFIG
    return 0


def main(factory: HostFactory, name: str, environ: Mapping[str, str]) -> int:
    """The whole life of a host process; returns its exit status (the host's module is imported already)."""
    arm_parent_death(environ)
    drop_secrets(environ)
    return asyncio.run(_amain(factory, name, environ))
