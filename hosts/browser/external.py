"""The browser host run outside the tree (``CLANKIE_BROWSER_HOST=external``): its own unit, its own user.

An operator who wants the renderer outside the secrets' uid entirely runs
this host as its own systemd unit (``docs/systemd/clankie-browser.*``,
``docs/operations.md``, "The browser in its own unit"). Nothing supervises it
from inside the tree then, so it brings three things of its own:

* **its socket**: the one systemd hands over by socket activation
  (``LISTEN_PID`` is ours, ``LISTEN_FDS`` >= 1, fd 3), checked and served as
  the supervisor's hand-over is (:func:`clankie.handover.inherited_listener`);
  without one, it binds ``CLANKIE_BROWSER_SOCKET`` itself (0600: only its own
  uid, or root, can dial it then);
* **its rule by uid** (:class:`ClientUid`): it serves only peers whose
  ``SO_PEERCRED`` uid is ``CLANKIE_BROWSER_CLIENT_UID`` (the tree's uid;
  blank: the uid that started it). The supervisor's pid list cannot reach a
  process outside the tree, and the uid is what the unit boundary is about.
  Any other peer has its hello answered ``peer_uid_refused`` and is counted;
* **its artifact directory** (:class:`SharedArtifacts`):
  ``CLANKIE_BROWSER_ARTIFACTS/browser``, 0711, each screenshot 0644 under its
  own sha256. The directory cannot be listed, so a file can be opened only by
  whoever already knows its hash, i.e. was handed its ref over the socket;
  the tree reads it, checks the hash and copies it under its own attachment
  root (:class:`service.captain.tools.hosts.ImportingClient`). The directory keeps
  the newest ``CLANKIE_BROWSER_ARTIFACTS_KEEP`` files; the oldest go.

Started as root (by hand, or a unit without ``DynamicUser=``) it still goes
apart to ``CLANKIE_BROWSER_USER`` first (:func:`hosts.browser.apart.go_apart`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pwd
import socket
import stat
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from clankie import artifacts
from clankie.errors import ConfigError, RemoteError
from clankie.handover import LISTEN_FDS_ENV, inherited_listener
from clankie.paths import process_environment
from clankie.peers import Refusal
from clankie.protocol import Artifact, Code
from clankie.settings import Settings
from hosts.runtime import admit_with, serve_on

from .apart import Apart, become, bind_now, target

log = logging.getLogger(__name__)

SD_LISTEN_FDS_START = 3
SD_VARIABLES = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")
SHARED_DIR_MODE = 0o711  # enter, never list
SHARED_FILE_MODE = 0o644


def client_uid(value: str, starting_uid: int) -> int:
    """The uid a host run apart serves: ``CLANKIE_BROWSER_CLIENT_UID`` (a name or a uid), blank for ``starting_uid``."""
    value = value.strip()
    if not value:
        return starting_uid
    if value.isdigit():
        return int(value)
    try:
        return pwd.getpwnam(value).pw_uid
    except KeyError:
        raise ConfigError(f"CLANKIE_BROWSER_CLIENT_UID: there is no user {value!r} on this machine") from None


@dataclass(frozen=True, slots=True)
class ClientUid:
    """Admits the peers of one uid (pure: ``SO_PEERCRED`` is read by the server, :class:`clankie.ipc.Server`)."""

    uid: int

    def admit(self, pid: int, uid: int) -> Refusal | None:
        if uid == self.uid:
            return None
        return Refusal(Code.PEER_UID_REFUSED, f"pid {pid} runs as uid {uid}; this browser host serves uid {self.uid} only")


def every_uid(uid: int) -> bool:
    """The first gate of a host run apart lets every uid through to :meth:`ClientUid.admit`, which names why."""
    return True


def systemd_listener(environ: Mapping[str, str], pid: int | None = None) -> socket.socket | None:
    """The listening socket systemd handed over (``sd_listen_fds(3)``: fd 3, ``LISTEN_PID`` ours), or None.

    Checked as the supervisor's hand-over is (a listening Unix stream socket,
    made close-on-exec); the ``LISTEN_*`` variables are dropped from this
    process's environment, so nothing it starts believes it got one too.
    """
    mine = os.getpid() if pid is None else pid
    listen_pid, count = environ.get("LISTEN_PID", ""), environ.get("LISTEN_FDS", "")
    if not (listen_pid.isdigit() and int(listen_pid) == mine and count.isdigit() and int(count) >= 1):
        return None
    sock = inherited_listener("browser", {LISTEN_FDS_ENV: f"browser:{SD_LISTEN_FDS_START}"})
    if sock is None:
        raise ConfigError("systemd handed over fd 3, but it is not a listening Unix stream socket "
                          "(clankie-browser.socket needs ListenStream= with a path)")
    env = process_environment()
    if isinstance(env, MutableMapping):
        for name in SD_VARIABLES:
            env.pop(name, None)
    return sock


def open_shared_dir(path: Path, owner: int | None = None, group: int | None = None) -> int:
    """An open fd of ``path/browser``, 0711, for the artifacts the tree reads by hash.

    ``path`` itself is made if missing (0711; systemd's ``RuntimeDirectory=`` makes it in the template). Run as root
    on the way to ``owner`` (going apart), both are handed to that user, as :mod:`hosts.browser.apart` hands over its
    directories; an existing directory that belongs to anyone else, or that group or others may write, is refused.
    """
    uid = os.geteuid() if owner is None else owner
    fds: list[int] = []
    try:
        for directory in (path, path / "browser"):
            made = True
            try:
                os.makedirs(directory, SHARED_DIR_MODE)
            except FileExistsError:
                made = False
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            fds.append(fd)
            st = os.fstat(fd)
            if st.st_uid not in (uid, os.geteuid()):
                raise ConfigError(f"refusing {directory}: it belongs to uid {st.st_uid}, not to the browser host's {uid}")
            if directory == path and not made and stat.S_IMODE(st.st_mode) & 0o022:
                raise ConfigError(f"refusing {directory}: group or others may write it (chmod 0711)")
            if directory == path and not made and not st.st_mode & 0o001:
                log.warning("%s is %04o: a tree of another uid cannot enter it to read the screenshots (make it 0711)",
                            directory, stat.S_IMODE(st.st_mode))
            if owner is not None and os.geteuid() == 0:
                os.fchown(fd, owner, group if group is not None else -1)
            if made or directory != path:  # ours: enterable by the tree, never listable, whatever the umask made it
                os.fchmod(fd, SHARED_DIR_MODE)
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        raise ConfigError(f"cannot use {path} for the browser's artifacts: {exc.strerror}") from None
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    os.close(fds[0])
    return fds[1]


class SharedArtifacts:
    """Writes screenshots into the shared directory (0644, by hash) and keeps only the newest ``keep``."""

    def __init__(self, directory: int, keep: int) -> None:
        self.directory = directory
        self.keep = keep
        self.pruned = 0

    async def store(self, data: bytes, ext: str) -> Artifact:
        """:meth:`write` off the loop, as the artifact record; a failed write is ``artifact_write_failed``."""
        try:
            ref = await asyncio.to_thread(self.write, data, ext)
        except OSError as exc:
            log.error("cannot write a screenshot where the tree reads it: %s", exc.strerror)
            raise RemoteError(Code.ARTIFACT_WRITE_FAILED, "the artifact could not be written") from None
        digest, _sub, _ext = artifacts.parse_ref(ref)
        return Artifact(ref=ref, sha256=digest, size=len(data), mime=artifacts.EXTENSIONS[ext])

    def write(self, data: bytes, ext: str) -> str:
        """Store ``data`` and return its ref (:func:`clankie.artifacts.write_into`), readable by the tree."""
        ref = artifacts.write_into(self.directory, "browser", data, ext)
        digest, _sub, _ext = artifacts.parse_ref(ref)
        fd = os.open(f"{digest}.{ext}", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.directory)
        try:
            os.fchmod(fd, SHARED_FILE_MODE)
            os.utime(fd)  # the same picture again is the newest again
        finally:
            os.close(fd)
        self.prune()
        return ref

    def prune(self) -> None:
        """Remove the oldest files past ``keep`` (by modification time; a half-written ``.tmp`` is left alone)."""
        seen: list[tuple[int, str]] = []
        for name in os.listdir(self.directory):
            if name.startswith("."):
                continue
            with contextlib.suppress(FileNotFoundError):
                seen.append((os.stat(name, dir_fd=self.directory, follow_symlinks=False).st_mtime_ns, name))
        seen.sort()
        for _mtime, name in seen[: max(0, len(seen) - self.keep)]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=self.directory)
                self.pruned += 1


@dataclass(frozen=True, slots=True)
class External:
    """What the browser host holds once it runs outside the tree."""

    client: ClientUid
    listener: socket.socket
    artifacts: SharedArtifacts
    apart: Apart | None  # started as root: the user it became


def go_external(settings: Settings, environ: Mapping[str, str]) -> External:
    """Take systemd's socket (or bind ``CLANKIE_BROWSER_SOCKET``), open the shared artifact directory and, started as
    root, go apart to ``CLANKIE_BROWSER_USER``; every step that needs root is done before the drop."""
    client = ClientUid(client_uid(settings.browser_client_uid, os.getuid()))
    listener = systemd_listener(environ) or bind_now(settings.browser_socket)
    who = target(settings.browser_user, os.geteuid())
    if who is None:
        fd = open_shared_dir(settings.browser_artifacts)
        apart = None
    else:
        fd = open_shared_dir(settings.browser_artifacts, *who)
        apart = become(settings, *who, fd, None)
    serve_on("browser", listener)
    admit_with("browser", client.admit, every_uid)
    log.info("serving %s for uid %d; screenshots in %s", listener.getsockname(), client.uid, settings.browser_artifacts)
    return External(client, listener, SharedArtifacts(fd, settings.browser_artifacts_keep), apart)
