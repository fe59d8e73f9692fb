"""The child's side of the hand-over: the listening socket it inherited, and starting as a warm spare.

With ``CLANKIE_HANDOVER`` on (the default) the supervisor binds every
listening socket of the tree once and hands each child its own as an
inherited fd, named in ``CLANKIE_LISTEN_FDS`` (``name:fd``, the same idea as
systemd's ``LISTEN_FDS``, which cannot be used as is: ``posix_spawn`` cannot
put the child's own pid in ``LISTEN_PID``). A child serves that socket
instead of binding one (:func:`inherited_listener`); a client that connects
while the child is being replaced waits in the backlog the supervisor keeps
open and is served by the next child.

A process started with ``CLANKIE_SPARE=1`` is a warm spare: it imports its
heavy modules, says ``parked`` on its link and waits for ``activate``
(:meth:`clankie.link.Link.activation`) before it reads its settings or
touches any state, so it starts its life exactly where a cold start would,
minus the imports.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

from clankie.paths import process_environment

LISTEN_FDS_ENV = "CLANKIE_LISTEN_FDS"
SPARE_ENV = "CLANKIE_SPARE"


def listen_fds_value(fds: Mapping[str, int]) -> str:
    """The ``CLANKIE_LISTEN_FDS`` value naming each inherited listening fd."""
    return ",".join(f"{name}:{fd}" for name, fd in fds.items())


def listen_fds(env: Mapping[str, str] | None = None) -> dict[str, int]:
    """The names and fds of the listening sockets handed down in ``CLANKIE_LISTEN_FDS`` (nothing is opened)."""
    return _parse((process_environment() if env is None else env).get(LISTEN_FDS_ENV, ""))


def _parse(raw: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in raw.split(","):
        name, _, fd = item.partition(":")
        if name and fd.isdigit():
            out[name] = int(fd)
    return out


def inherited_listener(name: str, env: Mapping[str, str] | None = None) -> socket.socket | None:
    """The listening Unix socket the supervisor handed us for ``name``, or None (then bind one).

    The fd is made close-on-exec at once, so nothing this child starts
    (Chromium, a Node validator) holds the tree's socket. An fd that is not a
    listening Unix stream socket is ignored, as if none had been handed down.
    """
    fd = _parse((process_environment() if env is None else env).get(LISTEN_FDS_ENV, "")).get(name)
    if fd is None:
        return None
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    except OSError:
        listening = 0
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM or not listening:
        sock.detach()
        return None
    sock.set_inheritable(False)
    return sock


def is_spare(env: Mapping[str, str] | None = None) -> bool:
    """True when this process was started as a warm spare (park until activated)."""
    return (process_environment() if env is None else env).get(SPARE_ENV, "") == "1"
