"""One entry point for every supervised child: :func:`run_child` is the skeleton, a :class:`ChildSpec` fills it in.

The service, the bridge and the two hosts share one life (each ``__main__``
is ``sys.exit(run_child(SPEC))``):

1. arm parent death (:func:`clankie.child.arm_parent_death`);
2. drop every secret variable from the environment anything this process
   spawns would inherit, and, in a child that keeps no secret, from its own
   copy too (a secret reaches only the process that needs it);
3. unless this process is a spare of a spec that parks first: read the
   handed-over secrets (if it keeps them) and the settings, configure
   logging and then observability (:func:`clankie.observability.configure`:
   the meter and the spec's own switches); a cold start refuses a bad
   setting before it imports anything heavy;
4. ``warm`` (the spec's imports, before any event loop), then settle the
   heap (:func:`clankie.heap.settle`: each ``__main__`` holds the collector
   off from its first line);
5. in the loop: link to the supervisor; SIGTERM and Ctrl-C ask for a
   graceful stop; a spare of a spec that parks first parks here (it waits
   for ``activate``) and only then reads secrets and settings;
6. build the child's :class:`Body`, attach its link handler and heartbeat,
   ``prepare`` it (a spare that did not park yet parks after this), ``run``
   it until ``shutdown``, SIGTERM or Ctrl-C, say ``stopping``, cancel it,
   ``close`` it.

Exit status: 0 after a graceful stop (or stopped while parked, or Ctrl-C
before the loop), 78 (``EX_CONFIG``) with one line ``<name>: <why>`` on
stderr for a :class:`~clankie.errors.ConfigError` at any step, 1 when the
body ends by itself, and an unexpected exception leaves as a traceback (1).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from clankie import heap, ipc, logs, observability
from clankie import settings as settings_mod
from clankie.child import arm_parent_death
from clankie.errors import EX_CONFIG, ConfigError
from clankie.handover import is_spare
from clankie.link import Link, supervisor_link
from clankie.observability import Part
from clankie.paths import process_environment
from clankie.protocol import Heartbeat
from clankie.redact import Redactor
from clankie.secrets import SECRET_VARIABLES
from clankie.secrets import receive as receive_secrets
from clankie.settings import Settings

log = logging.getLogger(__name__)

EXIT_BODY_ENDED = 1
"""A body's ``run`` returned without being asked to stop (the bridge's Discord task group ended)."""

Ready = Callable[[], Awaitable[None]]


class Body(Protocol):
    """What a child's build function returns: the part of the process that is that child's own."""

    @property
    def link_handler(self) -> ipc.Handler | None:
        """Answers the supervisor's requests over the link (None: every one is ``method_not_found``)."""

    def heartbeat(self) -> Heartbeat:
        """This child's heartbeat, sent every ``heartbeat_seconds``."""

    async def prepare(self) -> None:
        """The slow start a warm spare does before it parks (the hosts start Chromium); may do nothing."""

    async def run(self, ready: Ready) -> None:
        """Serve, ``await ready()`` once serving, then run until cancelled; returning or raising ends the child."""

    async def close(self) -> None:
        """Release what ``run`` opened; called once, also when ``run`` never started or failed."""


@dataclass(frozen=True)
class ChildSpec:
    """What differs between children; the skeleton (:func:`run_child`) is the same for all."""

    name: str
    """The link name, the log role and the prefix of the one-line configuration error."""
    build: Callable[[Settings, Mapping[str, str]], Body]
    """Builds this life's body from its settings and its environment (without secrets)."""
    keeps_secrets: bool = False
    """Reads the secrets the supervisor hands over (service: the model key; bridge: the token). False: any
    secret variable is dropped from its copy of the environment too, so it never holds one."""
    parks_first: bool = False
    """A warm spare parks before reading secrets or settings and before building anything (the service:
    the live process owns the state until the hand-over, and settings are read once, for the life it takes
    over). False: settings are read and the body built and prepared at spawn, and the spare parks just
    before serving (the hosts: Chromium is up when activated; the bridge: logged in, no gateway socket). A child
    that is not started as a spare passes straight through either way."""
    warm: Callable[[], None] | None = None
    """Imports done before any event loop, reading no settings (the service's SDK warm-up)."""
    observability: Sequence[Part] = ()
    """The child's own switches of what it reports, set once with the meter (:func:`clankie.observability.configure`):
    the service's tracer and records' rotations."""


def drop_secrets(environ: Mapping[str, str]) -> None:
    """Remove every secret variable from ``environ`` if it is mutable (``os.environ`` above all)."""
    if isinstance(environ, MutableMapping):
        for name in SECRET_VARIABLES:
            environ.pop(name, None)


def _configure(spec: ChildSpec, env: Mapping[str, str]) -> Settings:
    """Read this life's secrets (if the spec keeps them) and settings once; configure logging, then observability."""
    settings = settings_mod.load(receive_secrets(env) if spec.keeps_secrets else env)
    logs.configure(spec.name, settings.log_level, redact=Redactor.of(settings))  # the secrets this child holds
    observability.configure(settings, env, spec.observability)  # the meter, and the child's own switches
    return settings


def run_child(spec: ChildSpec, environ: Mapping[str, str] | None = None) -> int:
    """The whole life of a child process; returns its exit status (see the module docstring)."""
    source = process_environment() if environ is None else environ
    env = dict(source)
    arm_parent_death(env)
    drop_secrets(source)  # nothing this process spawns (Chromium, Node) inherits one
    if not spec.keeps_secrets:
        drop_secrets(env)
    try:
        # a cold start reads its settings before the warm imports, so a bad one is refused at once; only a spare
        # that parks first waits for ``activate`` to read them
        settings = None if spec.parks_first and is_spare(env) else _configure(spec, env)
        if spec.warm is not None:
            spec.warm()
        heap.settle()  # the start's imports are done: all it built frozen, the collector on
        return asyncio.run(_amain(spec, env, settings))
    except ConfigError as exc:
        print(f"{spec.name}: {exc}", file=sys.stderr, flush=True)
        return EX_CONFIG
    except KeyboardInterrupt:  # Ctrl-C before the loop's handler is in place
        return 0


async def _amain(spec: ChildSpec, env: Mapping[str, str], settings: Settings | None) -> int:
    interval = settings.heartbeat_seconds if settings is not None else None
    async with supervisor_link(spec.name, interval=interval, env=env) as link:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, link.request_shutdown, sig.name)
        if settings is None:
            if not await link.activation():  # a spare parks here; a cold start goes straight on
                return 0
            settings = _configure(spec, env)  # read once, for this life
        body = spec.build(settings, env)
        link.attach(body.link_handler, body.heartbeat, settings.heartbeat_seconds)
        try:
            await body.prepare()
            if not spec.parks_first and not await link.activation():  # a spare parks here, prepared
                return 0
            return await _serve(body, link)
        finally:
            await body.close()


async def _serve(body: Body, link: Link) -> int:
    """Run the body until it ends by itself or the link asks for a stop (``shutdown``, SIGTERM, Ctrl-C)."""
    running = asyncio.create_task(body.run(link.ready), name=f"{link.name}-body")
    stop = asyncio.create_task(link.shutdown.wait(), name=f"{link.name}-stop")
    try:
        await asyncio.wait({running, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if running.done():
        running.result()  # a ConfigError (or any failure) leaves through here
        return EXIT_BODY_ENDED
    log.info("stopping (%s)", link.shutdown_reason or "asked")
    await link.stopping(link.shutdown_reason)
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running
    return 0
