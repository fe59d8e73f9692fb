"""The browser host apart: run as root, it becomes ``CLANKIE_BROWSER_USER`` before anything else happens.

When the tree runs as root (CI, containers), the browser host, its Node
driver and Chromium must not: Chromium will not sandbox itself as root, and
what renders untrusted pages must not share a uid with the secret holders.
So the browser process, still root, does three things (four with the
hand-over off: it binds its own socket first, as nobody could in the
supervisor's 0700 runtime dir) and then gives root up for good
(:func:`go_apart`):

1. it makes ``<root>/browser`` (the attachment root's browser directory)
   belong to the browser user, 0700, and keeps it open: artifacts are then
   written *through that fd* (:func:`hosts.runtime.write_through`), because
   the user may not be allowed to walk the path to it (a state dir under
   ``/root`` or a 0700 pytest dir);
2. it makes ``<tmp>/clankie-browser.<uid>`` (the system temp dir, which
   every user can reach) belong to that user, 0700, for the Node driver's
   and Chromium's profiles: Chromium needs a path there, not an fd;
3. it drops to the user: supplementary groups cleared, real, effective and
   saved gid and uid set, ``PR_SET_NO_NEW_PRIVS`` on, and the parent-death
   signal armed again (the kernel clears it when the credentials change).

Why here and not with ``setpriv`` before ``exec``: the interpreter and its
standard library must then be readable by that user, and a pyenv under
``/root`` (this project's CI machine) is not. The drop happens before the
host reads a request or starts Chromium, so nothing untrusted ever meets
root; the listening socket was handed over by fd and stays usable. The
supervisor, the service and the bridge are unaffected; the bridge still
resolves every artifact by hash (:func:`clankie.artifacts.resolve_artifact`),
so a browser that wrote something else into its own directory gets nothing
past it.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import logging
import os
import pwd
import socket
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from clankie.child import arm_parent_death
from clankie.errors import ConfigError
from clankie.handover import listen_fds
from clankie.paths import ensure_private_dir, socket_path
from clankie.settings import Settings
from clankie.sockfile import listen_private

log = logging.getLogger(__name__)

PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
SUBDIR = "browser"
# Standard-library modules imported lazily on the host's paths, loaded before the drop: the interpreter may live where
# the browser user cannot read (pyenv under /root), and an import after the drop would then fail. The rest of what the
# host imports is loaded at its own import; docs/hosts.md says how to make the interpreter readable instead.
PRELOAD = (
    "concurrent.futures.thread",  # asyncio.to_thread, getaddrinfo in the default executor
    "encodings.idna", "encodings.punycode", "stringprep", "unicodedata",  # host names in the policy and resolver
    "asyncio.subprocess", "asyncio.unix_events",  # Playwright's driver
    "_strptime", "shutil", "tempfile", "traceback", "linecache", "tokenize",  # logs and clean-up
)


@dataclass(frozen=True, slots=True)
class Apart:
    """What the browser host holds once it runs as its own user."""

    user: str
    uid: int
    gid: int
    tmp_root: Path  # <tmp>/clankie-browser.<uid>: the Node driver's and Chromium's profiles
    artifacts: int  # an open fd of <root>/browser, owned by the user
    listener: socket.socket | None  # bound here before the drop when none was handed over (CLANKIE_HANDOVER=false)


def target(name: str, euid: int) -> tuple[int, int] | None:
    """``(uid, gid)`` to drop to, or None when there is nothing to drop (not root, or the user named is root)."""
    name = name.strip()
    if euid != 0 or name in ("root", "0"):
        return None
    try:
        entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except KeyError:
        if not name.isdigit():
            raise ConfigError(f"CLANKIE_BROWSER_USER: there is no user {name!r} on this machine") from None
        uid = gid = int(name)  # a bare uid with no passwd entry: its own group
    else:
        uid, gid = entry.pw_uid, entry.pw_gid
    if uid == 0:
        raise ConfigError(f"CLANKIE_BROWSER_USER: {name!r} is uid 0; name root itself to keep the browser as root")
    return uid, gid


def go_apart(settings: Settings, environ: Mapping[str, str]) -> Apart | None:
    """Prepare the user's two directories and drop to it (see the module docstring); None when not root."""
    who = target(settings.browser_user, os.geteuid())
    if who is None:
        return None
    uid, gid = who
    listener = None if SUBDIR in listen_fds(environ) else bind_now(socket_path(settings.runtime_dir, SUBDIR))
    fd = _hand_over(ensure_private_dir(settings.attachment_root) / SUBDIR, uid, gid)
    return become(settings, uid, gid, fd, listener)


def become(settings: Settings, uid: int, gid: int, artifacts: int, listener: socket.socket | None) -> Apart:
    """Make the user's temp root, load what the host imports lazily, drop to ``uid:gid`` and check the user can run
    the driver; ``artifacts`` (an open directory the user owns) and ``listener`` were prepared while still root."""
    tmp_root = Path(tempfile.gettempdir()) / f"clankie-browser.{uid}"
    os.close(_hand_over(tmp_root, uid, gid))
    for name in PRELOAD:
        importlib.import_module(name)
    drop(uid, gid)
    if not os.access(tmp_root, os.W_OK | os.X_OK):
        raise ConfigError(f"the browser user (uid {uid}) cannot reach {tmp_root}; set TMPDIR to a directory it can")
    for path, mode, what in _driver_files():
        if not os.access(path, mode):
            raise ConfigError(
                f"the browser user (uid {uid}) cannot {what} {path}: install the project where that user can read it, "
                "or keep the browser as root (CLANKIE_BROWSER_USER=root, CLANKIE_BROWSER_SANDBOX=off)"
            )
    log.info("running as %s (uid %d, gid %d), no_new_privs", settings.browser_user.strip(), uid, gid)
    return Apart(user=settings.browser_user.strip(), uid=uid, gid=gid, tmp_root=tmp_root, artifacts=artifacts,
                 listener=listener)


def bind_now(path: Path) -> socket.socket:
    """``path`` bound and listening, while still root (the hand-over is off, and the runtime dir is root's 0700): a
    stale file nobody answers on is replaced, a live server refused, the file 0600 from the first moment."""
    ensure_private_dir(path.parent)
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise ConfigError(f"{path} exists and is not a socket; refusing to replace it")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(1.0)
            try:
                probe.connect(os.fspath(path))
            except OSError:
                path.unlink()
            else:
                raise ConfigError(f"another server is already listening on {path}")
    return listen_private(path)


def _hand_over(path: Path, uid: int, gid: int) -> int:
    """An open fd of ``path`` as a 0700 directory owned by ``uid``: made if missing; an existing one must be a real
    directory owned by root (ours, from a run before the split) or already by ``uid``, else it is refused, never
    taken. Everything after the open goes through the fd, so a symlink swapped in meanwhile gains nothing."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"refusing {path}: it is not a directory we can open ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if st.st_uid not in (0, uid):
            raise ConfigError(f"refusing {path}: it belongs to uid {st.st_uid}, neither root nor the browser user {uid}")
        os.fchown(fd, uid, gid)
        os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _driver_files() -> list[tuple[str, int, str]]:
    """Playwright's Node driver and its script, which the browser user must run once it has dropped."""
    from playwright._impl._driver import compute_driver_executable

    node, cli = compute_driver_executable()
    return [(node, os.X_OK, "run"), (cli, os.R_OK, "read")]


def drop(uid: int, gid: int) -> None:
    """Become ``uid:gid`` for good: no supplementary groups, no way back, no gaining privileges by exec."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise OSError("the browser host's uid or gid did not change")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    arm_parent_death()  # cleared by the kernel when the credentials changed


def no_new_privs() -> bool:
    """Whether this process has ``PR_SET_NO_NEW_PRIVS`` set (for the health report)."""
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1)
