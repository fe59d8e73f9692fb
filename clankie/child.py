"""What every supervised child does first: die with its supervisor.

Call :func:`arm_parent_death` at the very top of a child's ``main`` (before
any thread or subprocess is started). It asks the kernel to send this process
``PARENT_DEATH_SIGNAL`` when the supervisor dies (``PR_SET_PDEATHSIG``) and
then checks that the parent is still the supervisor that spawned us: if the
supervisor died between its ``posix_spawn`` and our ``prctl``, the signal
would never come, so we leave at once.

The signal is handled by killing this child's whole process group (the
supervisor starts each child as a session and group leader), so the
grandchildren a child started (Chromium, a Node validator) go with it. A
process started by hand (no ``CLANKIE_SUPERVISOR_PID``) arms nothing.
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import signal
import sys
from collections.abc import Mapping
from types import FrameType

from clankie.paths import process_environment

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PARENT_DEATH_SIGNAL = signal.SIGUSR1
"""The signal the kernel sends a child when its supervisor dies; children must not use it otherwise."""

SUPERVISOR_PID_ENV = "CLANKIE_SUPERVISOR_PID"
SUPERVISOR_FD_ENV = "CLANKIE_SUPERVISOR_FD"
TREE_ID_ENV = "CLANKIE_TREE_ID"
"""Names one ``clankie run``: drawn at its start and given to every process it spawns, spares included."""
EXIT_ORPHANED = 70


def prctl(option: int, arg: int) -> None:
    """Call ``prctl(2)`` through libc; raise ``OSError`` on failure."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _die_with_group(signum: int, frame: FrameType | None) -> None:
    """Parent death: take every process of our group down, ourselves included."""
    try:
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
    finally:
        os._exit(EXIT_ORPHANED)


def supervisor_pid(env: Mapping[str, str] | None = None) -> int | None:
    """The pid of the supervisor that spawned this process, or None if started by hand."""
    raw = (process_environment() if env is None else env).get(SUPERVISOR_PID_ENV, "")
    return int(raw) if raw.isdigit() else None


def tree_id(env: Mapping[str, str] | None = None) -> str | None:
    """The id of the supervised tree this process belongs to, or None if started by hand.

    Two processes with the same id had the same supervisor, so one that finds
    what the other left behind knows the supervisor lived through its end.
    """
    raw = (process_environment() if env is None else env).get(TREE_ID_ENV, "").strip()
    return raw or None


def arm_parent_death(env: Mapping[str, str] | None = None) -> bool:
    """Arm ``PR_SET_PDEATHSIG`` and verify the parent; exit at once if it is already gone.

    Returns True when armed, False when this process was not started by a
    supervisor. Must run in the main thread, before other threads start.
    """
    expected = supervisor_pid(env)
    if expected is None:
        return False
    signal.signal(PARENT_DEATH_SIGNAL, _die_with_group)
    prctl(PR_SET_PDEATHSIG, PARENT_DEATH_SIGNAL)
    if os.getppid() != expected:
        print(f"supervisor {expected} is gone before this child armed; exiting", file=sys.stderr, flush=True)
        _die_with_group(PARENT_DEATH_SIGNAL, None)
    return True


def exit_if_orphaned(env: Mapping[str, str] | None = None, wait: float = 1.0) -> None:
    """If the supervisor that spawned us is gone (or going), take our process group down now.

    The link helper calls this when the link breaks. The supervisor's sockets
    close *before* the kernel reparents us, so ``getppid()`` cannot tell yet;
    a pidfd on the supervisor can: it turns readable the moment it has exited.
    A child must not exit gracefully here and leave its grandchildren behind.
    """
    expected = supervisor_pid(env)
    if expected is None:
        return
    if os.getppid() != expected:
        _die_with_group(PARENT_DEATH_SIGNAL, None)
    try:
        fd = os.pidfd_open(expected)
    except ProcessLookupError:
        _die_with_group(PARENT_DEATH_SIGNAL, None)
        return
    try:
        readable, _, _ = select.select([fd], [], [], wait)
    finally:
        os.close(fd)
    if readable:
        _die_with_group(PARENT_DEATH_SIGNAL, None)


def make_undumpable() -> None:
    """``PR_SET_DUMPABLE`` 0, first thing in a process that holds a secret (the supervisor, the service, the bridge).

    A non-dumpable process writes no core, and its ``/proc/<pid>/environ``,
    ``mem``, ``fd`` and the like are closed (``EACCES``) to every other process
    of the same uid that lacks ``CAP_SYS_PTRACE``: a compromised renderer
    cannot read the secrets out of it. What the supervisor used to read there
    (memory, open fds) each child now measures of itself and reports in its
    heartbeat. The flag is reset by ``execve``, so it is set by each process,
    not inherited.
    """
    prctl(PR_SET_DUMPABLE, 0)


def become_subreaper() -> None:
    """Adopt orphaned descendants (the supervisor calls this once at start)."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)
