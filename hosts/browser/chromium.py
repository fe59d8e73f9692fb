"""Finding Chromium, reading why it would not start, and whether its sandbox can start here.

Chromium's Linux sandbox has two layers (``docs/linux/sandboxing.md`` upstream):
namespaces (a user namespace of its own, in which it makes a new PID and
network namespace and chroots to an empty directory) and seccomp-bpf. Both
need an unprivileged user namespace. :func:`sandbox_obstacle` names what this
machine or this process lacks for one, before a launch is tried; a launch
that fails anyway is told apart by Chromium's own words
(:func:`sandbox_failure`). Either way the browser refuses with
``browser_sandbox_unavailable`` and says why, rather than running bare.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

CANDIDATES = (
    Path("/usr/lib/chromium/chromium-headless-shell"),
    Path("/usr/bin/chromium-headless-shell"),
    Path("/usr/bin/chromium"),
)

# What Chromium prints when its sandbox will not start (zygote_host_impl_linux.cc, credentials.cc, setuid
# sandbox host), and what Playwright adds around it ("Chromium sandboxing failed!").
SANDBOX_WORDS = (
    "Running as root without --no-sandbox is not supported",
    "No usable sandbox",
    "Failed to move to new namespace",
    "sandboxing failed",
    "setuid sandbox",
    "CLONE_NEWUSER",
)
_SYSCTLS = (
    ("/proc/sys/user/max_user_namespaces", "0", "user namespaces are off (user.max_user_namespaces = 0)"),
    ("/proc/sys/kernel/unprivileged_userns_clone", "0", "unprivileged user namespaces are off (kernel.unprivileged_userns_clone = 0)"),
    (
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        "1",
        "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1); "
        "give the Chromium binary an AppArmor profile with 'userns,' (docs/hosts.md)",
    ),
)


def find_chromium(configured: Path | None) -> Path | None:
    """The configured executable if it exists, else the first Debian candidate that does."""
    for path in (configured,) if configured is not None else CANDIDATES:
        with contextlib.suppress(OSError):  # a path this user may not look at (the host apart) is not there for it
            if path is not None and path.is_file() and os.access(path, os.X_OK):
                return path
    return None


def sandbox_obstacle(euid: int, proc: Path = Path("/proc")) -> str | None:
    """Why Chromium's sandbox cannot start in this process, or None when nothing known stands in its way."""
    if euid == 0:
        return "Chromium does not sandbox itself as root (crbug 638180): run the tree as another user, or let the " \
               "browser host drop to CLANKIE_BROWSER_USER"
    for path, bad, why in _SYSCTLS:
        with contextlib.suppress(OSError):
            if (proc / path.removeprefix("/proc/")).read_text().strip() == bad:
                return why
    return None


def sandbox_failure(message: str) -> bool:
    """Whether a failed launch's output says the sandbox would not start."""
    return any(word.lower() in message.lower() for word in SANDBOX_WORDS)


def launch_excerpt(exc: BaseException, limit: int = 1500) -> str:
    """One log line from a failed launch: Playwright's message ends with Chromium's own output (its exit code or
    signal, what it printed), which says why; no page or request has been seen yet, so it carries no content."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip() and set(line.strip()) != {"="}]
    text = " | ".join(lines)
    return text if len(text) <= limit else "\u2026" + text[-limit:]


NET_ERROR = re.compile(r"net::ERR_[A-Z_]+")


def navigation_error(exc: BaseException) -> str:
    """A failed navigation's message for the requester: Chromium's ``net::ERR_...`` name when it gave one (it
    names the failure, not the page), else a plain sentence."""
    match = NET_ERROR.search(str(exc))
    return f"the page could not be loaded ({match.group(0)})" if match else "the page could not be loaded"


def sandbox_reason(exc: BaseException, limit: int = 300) -> str:
    """Chromium's own sentence, from a failed launch, saying why its sandbox would not start (the refusal's
    message; it names no page, as no page has been seen)."""
    for line in str(exc).splitlines():
        low = line.lower()
        if "sandboxing failed!" in low:
            continue
        for word in SANDBOX_WORDS:
            at = low.find(word.lower())
            if at >= 0:
                start = line.rfind("] ", 0, at)
                text = line[start + 2 if start >= 0 else 0:].strip()
                return text if len(text) <= limit else text[:limit] + "\u2026"
    return "Chromium reported that its sandbox could not start"


def clear_stale(root: Path) -> None:
    """Remove what is under the browser's temp root except the directories of live processes.

    Each host process (the live one, and a warm spare that starts while it
    serves) keeps its Node driver's and Chromium's profiles under
    ``<root>/<pid>``. Emptying the whole root at start, as a lone host could,
    deleted a live host's profile under it: its next launch failed (ENOENT
    from mkdtemp) or its Chromium died (TargetClosedError). What a killed
    host left behind goes at the next start.
    """
    try:
        entries = list(root.iterdir())
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.name.isdigit() and entry.name != str(os.getpid()) and _alive(int(entry.name)):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                entry.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
