"""The shared host runtime: one process shell for the browser and tldraw hosts.

A host is an object that satisfies :class:`Host` (its methods and their
deadlines, a request handler, a health report). :func:`host_spec` gives it a
process through the one child skeleton (:func:`clankie.entry.run_child`):
settings are read at spawn (a bad value exits 78), the host keeps no secret,
and :class:`HostRuntime` is its body: ``prepare`` starts the host (launches
Chromium), then a warm spare parks until the supervisor activates it (a host
keeps no state of its own between requests, so its spare prepares
everything but the socket); ``run`` serves its socket (the one the
supervisor handed down, or ``<runtime>/<name>.sock`` bound here with the
hand-over off) with the hello handshake and says ``ready``; heartbeats carry
the host's health; ``close`` closes the socket and the host.

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
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from clankie import artifacts, ipc, paths
from clankie import settings as settings_mod
from clankie.clock import Clock, SystemClock
from clankie.entry import ChildSpec, Ready
from clankie.errors import ConfigError, RemoteError
from clankie.handover import inherited_listener
from clankie.peers import HANDED
from clankie.protocol import Artifact, Code, Empty, Heartbeat, Record
from clankie.router import Route, Router
from clankie.waits import within
from hosts.probe import probe_png

log = logging.getLogger(__name__)

HOST_START_SECONDS = 60.0
"""How long a host's ``start`` (Chromium's launch) may take before the process fails."""


class Host(Protocol):
    """What a host process provides to the runtime."""

    name: str  # "browser" or "tldraw": the socket name and the log role
    deadlines: Mapping[str, float]  # method -> seconds
    timeout_code: str

    async def start(self) -> None:
        """Prepare (may be slow); the socket opens only after this returns."""

    def routes(self) -> Mapping[str, Route]:
        """One handler per method of the host's role, each taking that method's record; the runtime
        builds its :class:`Router` from them (checked against the method table) and calls them inside
        the method's deadline. A handler answers its reply record or raises :class:`RemoteError`."""

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
        self.router = Router(host.name, host.routes())  # an unknown, missing or mistyped route fails here

    async def handler(self, conn: ipc.Connection, method: str, params: Record) -> Record | None:
        deadline = self.host.deadlines.get(method)
        if deadline is None:
            raise RemoteError(Code.METHOD_NOT_FOUND, f"{self.host.name} does not serve {method[:64]!r}")
        self.counters.inflight += 1
        try:
            async with asyncio.timeout(deadline) as scope:
                result = await self.router(conn, method, params)
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
                      unserved={"abort_run", "lanes", "say", "budget", "shutdown", "activate", "peers", "resolve_artifact"})

    async def _probe_artifact(self, params: Empty) -> Artifact:
        sub = self.host.name if self.host.name in artifacts.SUBDIRS else "generated"
        artifact = await write_artifact(self.settings.attachment_root, sub, probe_png(self.host.name), "png")
        log.info("wrote the doctor probe %s", artifact.ref)
        return artifact

    def health(self) -> dict[str, Any]:
        return {
            "attachment_root": str(self.settings.attachment_root),
            "peers_refused": dict(self.server.refusals) if self.server is not None else {},
            **self.counters.report(),
            **self.host.health(),
        }

    async def serve(self) -> None:
        path = paths.socket_path(self.settings.runtime_dir, self.host.name)
        listener = inherited_listener(self.host.name, self.environ) or _BOUND.pop(self.host.name, None)
        if listener is None:  # an inherited socket's directory is the supervisor's (and may not be ours to read)
            paths.ensure_private_dir(self.settings.runtime_dir)
        admit, uid_rule = _ADMISSION.get(self.host.name, (HANDED.admit, ipc.peer_allowed))  # the service only
        self.server = await ipc.serve(
            path, self.host.name, self.handler, max_frame=self.settings.max_frame_bytes, sock=listener,
            limits=ipc.Limits(hello_timeout=self.settings.ipc_hello_seconds), admit=admit, uid_rule=uid_rule,
        )
        log.info("serving on %s", listener.getsockname() if listener is not None else path)

    async def prepare(self) -> None:
        """Start the host (Chromium, Node); a warm spare does this before it parks."""
        await within(self.host.start(), HOST_START_SECONDS)

    async def run(self, ready: Ready) -> None:
        """Serve the socket, say ready, serve until cancelled (:func:`clankie.entry.run_child`)."""
        await self.serve()
        await ready()
        await asyncio.Event().wait()

    async def close(self) -> None:
        """Close the socket (if it was opened), then the host; called once."""
        if self.server is not None:
            await self.server.close()
            self.server = None
        await self.host.close()

    def heartbeat(self) -> Heartbeat:
        refused = sum(self.server.refusals.values()) if self.server is not None else 0
        detail = self.host.detail() + (f", {refused} peers refused" if refused else "")
        return Heartbeat(detail=detail[:200], report=self.health())


_BOUND: dict[str, socket.socket] = {}
"""Listening sockets this process bound for itself before it gave up root (:func:`serve_on`)."""


def serve_on(name: str, sock: socket.socket) -> None:
    """Serve ``sock`` as if it had been handed over (the browser host apart binds it before it drops root)."""
    _BOUND[name] = sock


_ADMISSION: dict[str, tuple[ipc.Admit, Callable[[int], bool]]] = {}
"""Who a host outside the tree serves instead of the supervisor's pids (:func:`admit_with`)."""


def admit_with(name: str, admit: ipc.Admit, uid_rule: Callable[[int], bool]) -> None:
    """Serve ``name``'s socket with this admission (the browser host run apart: the tree's uid, by its own rule)."""
    _ADMISSION[name] = (admit, uid_rule)


_DIRECTORIES: dict[str, int] = {}
"""Artifact subdirectories this process writes through an open fd instead of by path (:func:`write_through`)."""


def write_through(sub: str, directory: int) -> None:
    """From now on this process writes ``sub`` artifacts into the open directory ``directory`` (the browser host
    apart: its user owns ``<root>/browser`` but may not walk the path there)."""
    _DIRECTORIES[sub] = directory


async def write_artifact(root: Path, sub: str, data: bytes, ext: str, extra_refs: tuple[str, ...] = ()) -> Artifact:
    """Store ``data`` as a governed artifact and describe it; a failed write is ``artifact_write_failed``."""
    directory = _DIRECTORIES.get(sub)
    try:
        if directory is not None:
            ref = await asyncio.to_thread(artifacts.write_into, directory, sub, data, ext)
        else:
            ref = await asyncio.to_thread(artifacts.write_artifact, root, sub, data, ext)
    except OSError as exc:
        log.error("cannot write a %s artifact under the attachment root: %s", sub, exc.strerror)
        raise RemoteError(Code.ARTIFACT_WRITE_FAILED, "the artifact could not be written") from None
    except ConfigError as exc:  # the root is not ours and private: refused, and left as it is
        log.error("not writing a %s artifact: %s", sub, exc)
        raise RemoteError(Code.ARTIFACT_WRITE_FAILED, "the attachment root is not usable") from None
    digest, _sub, _ext = artifacts.parse_ref(ref)
    return Artifact(ref=ref, sha256=digest, size=len(data), mime=artifacts.EXTENSIONS[ext], extra_refs=extra_refs)


def host_spec(name: str, factory: HostFactory) -> ChildSpec:
    """The child spec of a host: it keeps no secret; it is built and started at spawn, and a spare parks started."""

    def build(settings: settings_mod.Settings, environ: Mapping[str, str]) -> HostRuntime:
        clock = SystemClock()
        return HostRuntime(factory(settings, clock), settings, clock, environ)

    return ChildSpec(name, build)
