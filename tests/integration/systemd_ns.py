"""Boot a real systemd as PID 1 of a private PID and mount namespace, exactly as
``shared/reference/systemd-testing.md`` prescribes, and talk to it.

What keeps the machine safe (the reference's "what destroys other people's
work" list, plus a little more):

* ``unshare --pid --fork --mount --mount-proc --propagation private`` (and
  ``--uts``, so a booting systemd cannot rename the host); every mount below
  exists only in that namespace and dies with it;
* private tmpfs on ``/run`` (the units live in its ``/run/systemd/system``),
  ``/tmp`` and ``/var/tmp`` (a booting systemd empties those), and also on
  ``/var/lib`` (``StateDirectory=``, DynamicUser's ``/var/lib/private``) and
  ``/var/log`` (journald), so nothing of the unit's lands on the host;
* ``systemd-tmpfiles-setup{,-dev,-dev-early}.service``,
  ``systemd-tmpfiles-clean.{service,timer}``, ``sysinit.target`` and
  ``basic.target`` masked; the boot target is our own small one with
  ``DefaultDependencies=no`` (never ``rescue.target`` or the default);
* a private ``/dev`` (only null, zero, full, random, urandom, tty and kmsg
  bound in from the host's): the host's devtmpfs is shared, and a booting
  systemd writes to it (journald's ``/dev/log``, the console);
* the namespace's systemd gets a cgroup subtree of its own (a directory in
  the host's unified hierarchy, seen through a cgroup2 mount of the
  namespace's own over ``/sys/fs/cgroup``), so it never manages anyone
  else's processes nor touches the host's ``/sys/fs/cgroup`` tmpfs (it
  remounts that read-only); the subtree is removed afterwards;
* we talk to it only with ``nsenter -t <its pid> -p -m``; the host's
  systemd (if any) is never called. The end is SIGKILL of its pid: the
  kernel then kills everything in the namespace.

The unit's interpreter must be reachable by a ``DynamicUser=`` with
``ProtectHome=yes``, wherever the checkout lives (``/opt`` and ``/tmp`` are
private tmpfs in the namespace; ``/home`` and ``/root`` are hidden from the
unit): the checkout, and its site-packages when they live elsewhere, are
bind-mounted into the namespace before anything hides them and carried to
fixed paths of their own (:data:`CHECKOUT`, :data:`CARRIED_SITE`); a venv made
there from ``/usr/bin/python3`` imports from those paths only.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from clankie.child import PR_SET_PDEATHSIG, prctl
from tests.polling import until_sync

T = TypeVar("T")

MASKED = (
    "systemd-tmpfiles-setup.service",
    "systemd-tmpfiles-setup-dev.service",
    "systemd-tmpfiles-setup-dev-early.service",
    "systemd-tmpfiles-clean.service",
    "systemd-tmpfiles-clean.timer",
    "sysinit.target",
    "basic.target",
)
SYSTEMD = Path("/lib/systemd/systemd")
SYSTEM_PYTHON = Path("/usr/bin/python3")
CGROUP_ROOT = Path("/sys/fs/cgroup")
REPO = Path(__file__).resolve().parents[2]
SITE = next(Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
PRIVATE = ("/run", "/tmp", "/var/tmp", "/var/lib", "/var/log", "/opt")
CHECKOUT = Path("/opt/clankie/src")
"""Where the checkout is seen inside the namespace, wherever it lives on the host."""
CARRIED_SITE = Path("/opt/clankie/site")
"""Where the venv's site-packages are seen when they are not inside the checkout."""

TARGET = """[Unit]
Description=clankie systemd test boot
DefaultDependencies=no
Wants=systemd-journald.service clankie.service
After=systemd-journald.service
"""

PRIVATE_DEV = """
mkdir /run/host-dev
mount --rbind /dev /run/host-dev
mount -t tmpfs -o mode=0755,nosuid clankie-test-dev /dev
for node in null zero full random urandom tty kmsg; do
  touch "/dev/$node"
  mount --bind "/run/host-dev/$node" "/dev/$node"
done
mkdir /dev/pts /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 clankie-test-pts /dev/pts
ln -s pts/ptmx /dev/ptmx
mount -t tmpfs -o mode=1777,nosuid,nodev clankie-test-shm /dev/shm
ln -s /proc/self/fd /dev/fd
ln -s /proc/self/fd/0 /dev/stdin
ln -s /proc/self/fd/1 /dev/stdout
ln -s /proc/self/fd/2 /dev/stderr
umount -l /run/host-dev
rmdir /run/host-dev
"""
"""A /dev of our own: a booting systemd writes to /dev (journald's /dev/log, the console), and the host's
devtmpfs is shared by every mount namespace; only these device nodes are bound in from it."""

SCRIPT_VENV = """
/usr/bin/python3 -m venv --without-pip /opt/clankie/venv
site=$(/opt/clankie/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "import site, sys; sys.path.append({checkout}); site.addsitedir({site})" > "$site/clankie-checkout.pth"
for tool in clankie:supervisor.app clankiectl:supervisor.ctl; do
  name=${{tool%%:*}}; module=${{tool#*:}}
  printf '#!/opt/clankie/venv/bin/python\\nimport sys\\nfrom %s import main\\nsys.exit(main())\\n' "$module" \\
    > "/opt/clankie/venv/bin/$name"
  chmod 0755 "/opt/clankie/venv/bin/$name"
done
"""


def _die_with_parent() -> None:
    """In the forked child, before exec: SIGKILL when the thread that spawned us ends."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def missing_tools() -> str | None:
    """Why this machine cannot boot a namespaced systemd at all: a tool is not installed (None if all are)."""
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not SYSTEMD.is_file():
        return f"systemd is not installed ({SYSTEMD} is missing)"
    return None


def unmet_prerequisite() -> str | None:
    """What else the test needs (root, ``/usr/bin/python3``, a checkout others may read); a failure, not a skip."""
    if os.geteuid() != 0:
        return "booting systemd in a namespace needs root (CI runs the suite as root)"
    if not SYSTEM_PYTHON.is_file():
        return f"{SYSTEM_PYTHON} is missing: the unit's venv is made from it (DynamicUser= cannot use a pyenv under /root)"
    for path in (REPO, SITE):  # only the carried directories themselves: their host parents are not on the unit's path
        if not os.stat(path).st_mode & 0o005:
            return f"{path} is not readable by other users, so the unit's DynamicUser cannot import from it"
    return None


def require_namespaced_systemd() -> None:
    """Skip when a tool is not installed (the one skip), fail when a prerequisite is unmet: each real-systemd test's
    first line."""
    reason = missing_tools()
    if reason is not None:
        print(f"SKIPPED: {reason}")
        pytest.skip(reason)
    unmet = unmet_prerequisite()
    assert unmet is None, unmet


def carried() -> list[tuple[Path, Path]]:
    """(host path, path inside the namespace) of what the unit must import: the checkout, and the
    site-packages too when they are not inside it."""
    pairs = [(REPO, CHECKOUT)]
    if REPO not in SITE.parents:
        pairs.append((SITE, CARRIED_SITE))
    return pairs


def site_inside() -> Path:
    """The venv's site-packages as the namespace sees them."""
    return CHECKOUT / SITE.relative_to(REPO) if REPO in SITE.parents else CARRIED_SITE


class NamespacedSystemd:
    """One systemd in its own PID and mount namespace; units are staged before :meth:`boot`."""

    def __init__(self, stage: Path) -> None:
        self.stage = stage
        self.units = stage / "units"
        self.units.mkdir(parents=True)
        self.tag = f"clankie-test-{os.getpid()}-{id(self) & 0xFFFF:x}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None  # systemd's pid, as the host sees it
        self.console = stage / "console.log"
        self._cgroup: Path | None = None
        self._users: list[tuple[str, int]] = []

    # ------------------------------------------------------------ staging

    def add_unit(self, name: str, text: str) -> None:
        path = self.units / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def add_user(self, name: str, uid: int) -> None:
        """A static system user (and its group, same id) that exists inside the namespace only: the namespace sees
        copies of the host's ``/etc/passwd`` and ``/etc/group`` with it added, bound over them in its private mount
        namespace; the host's files are never written (what ``systemd-sysusers`` would do on a real host)."""
        self._users.append((name, uid))

    def _accounts(self) -> list[str]:
        """Shell lines that bind the namespace's own passwd and group (staged here, read before /tmp is covered)."""
        if not self._users:
            return []
        passwd = Path("/etc/passwd").read_text() + "".join(
            f"{name}:x:{uid}:{uid}:{name}:/nonexistent:/usr/sbin/nologin\n" for name, uid in self._users)
        group = Path("/etc/group").read_text() + "".join(f"{name}:x:{uid}:\n" for name, uid in self._users)
        lines = []
        for name, text in (("passwd", passwd), ("group", group)):
            staged = self.stage / name
            staged.write_text(text)
            staged.chmod(0o644)
            lines += [f"cp {shlex.quote(str(staged))} /run/clankie-{name}",
                      f"mount --bind /run/clankie-{name} /etc/{name}"]
        return lines

    def _script(self, target: str) -> str:
        lines = ["set -eu"]
        if self._cgroup is not None:
            lines.append(f"echo 0 > {shlex.quote(str(self._cgroup / 'cgroup.procs'))}")
        # The checkout may live anywhere, /opt and /tmp included, which the tmpfs mounts below hide: bind it
        # (and a site-packages outside it) first, onto mount points in the stage; a bind holds the directory
        # itself, not its path, so it survives the checkout's own path being covered. The stage is read
        # before /tmp is covered; the binds then move to their fixed paths once /opt is ours.
        carry = self.stage / "carry"
        moves: list[tuple[Path, Path]] = []
        for i, (host, inside) in enumerate(carried()):
            point = carry / str(i)
            point.mkdir(parents=True, exist_ok=True)
            lines.append(f"mount --rbind {shlex.quote(str(host))} {shlex.quote(str(point))}")
            moves.append((point, inside))
        lines += [
            # read everything we need from the host's /tmp before a private tmpfs hides it
            "mount -t tmpfs -o mode=0755 clankie-test-run /run",
            "mkdir -p /run/systemd/system",
            f"cp -r {shlex.quote(str(self.units))}/. /run/systemd/system/",
            *self._accounts(),
            "mkdir /run/clankie-carry",
        ]
        for i, (point, _inside) in enumerate(moves):
            lines += [f"mkdir /run/clankie-carry/{i}", f"mount --move {shlex.quote(str(point))} /run/clankie-carry/{i}"]
        lines += [f"ln -sf /dev/null /run/systemd/system/{unit}" for unit in MASKED]
        lines.append(PRIVATE_DEV)
        # cgroups: a cgroup2 mount of our own over the host's /sys/fs/cgroup tmpfs (a booting systemd would
        # create and remount things on that shared tmpfs); our subtree of the unified hierarchy is its root
        lines.append("mount -t cgroup2 clankie-test-cgroup /sys/fs/cgroup")
        for mount in PRIVATE[1:]:
            lines.append(f"mount -t tmpfs -o mode={'1777' if 'tmp' in mount else '0755'} clankie-test {mount}")
        for i, (_point, inside) in enumerate(moves):
            lines += [f"mkdir -p {shlex.quote(str(inside))}", f"mount --move /run/clankie-carry/{i} {shlex.quote(str(inside))}"]
        lines.append("rmdir /run/clankie-carry/* /run/clankie-carry")
        # Python literals inside a double-quoted echo
        lines.append(SCRIPT_VENV.format(checkout=repr(str(CHECKOUT)), site=repr(str(site_inside()))))
        lines.append(
            f"exec {SYSTEMD} --system --unit={shlex.quote(target)} --log-target=kmsg --show-status=no"
        )
        return "\n".join(lines)

    def _make_cgroup(self) -> None:
        unified = CGROUP_ROOT / "unified"
        if not (unified / "cgroup.procs").exists():
            unified = CGROUP_ROOT  # a pure cgroup2 host
        if (unified / "cgroup.procs").exists() and (unified / "cgroup.subtree_control").exists():
            for stale in unified.glob("clankie-test-*"):
                _remove_if_abandoned(stale)
            path = unified / self.tag
            path.mkdir()
            self._cgroup = path

    # ------------------------------------------------------------ running

    def boot(self, target: str = "clankie-test.target", timeout: float = 60.0) -> None:
        """Start systemd and wait until it answers ``systemctl``."""
        self.start(target)
        self.wait_booted(timeout)

    def start(self, target: str = "clankie-test.target") -> None:
        """Spawn ``unshare … systemd`` (quick; call it from the thread that lives as long as the test).

        ``--kill-child`` takes the namespace down if unshare dies, and unshare gets SIGKILL if the
        thread that started it dies (``PR_SET_PDEATHSIG``), so a killed test run leaves no systemd behind.
        """
        self.add_unit(target, TARGET)
        self._make_cgroup()
        argv = ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--propagation", "private",
                "--uts", "sh", "-c", self._script(target)]
        with self.console.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, preexec_fn=_die_with_parent
            )

    def wait_booted(self, timeout: float = 60.0) -> None:
        self.pid = self._wait(lambda: self._namespace_init(), timeout, "systemd to start in the namespace")
        self._wait(lambda: self._is_systemd(), timeout, "PID 1 of the namespace to be systemd")
        self._wait(lambda: self.systemctl("is-system-running", check=False).stdout.strip() not in ("", "offline"),
                   timeout, "systemd to answer systemctl")

    def _namespace_init(self) -> int | None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"unshare exited {self.proc.returncode}: {self.console.read_text(errors='replace')}")
        try:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        except FileNotFoundError:
            return None
        return int(children[0]) if children else None

    def _is_systemd(self) -> bool:
        assert self.pid is not None
        try:
            return os.readlink(f"/proc/{self.pid}/exe").endswith("/systemd")
        except OSError:
            return False

    def _wait(self, pred: Callable[[], T | None], timeout: float, what: str) -> T:
        return until_sync(pred, timeout, lambda: f"{what}\n{self.journal()[-4000:]}", step=0.05)

    def run(self, *argv: str, check: bool = True, timeout: float = 60.0, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
        """Run a command inside the namespace (its PID and mount namespaces; the host's network)."""
        assert self.pid is not None
        clean = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", **(env or {})}
        done = subprocess.run(["nsenter", "-t", str(self.pid), "-p", "-m", "--", *argv],
                              capture_output=True, text=True, timeout=timeout, env=clean)
        if check and done.returncode != 0:
            raise AssertionError(f"{argv} exited {done.returncode}: {done.stderr.strip()}{done.stdout.strip()}")
        return done

    def systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("systemctl", "--no-pager", *args, check=check)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.systemctl("show", unit, "-p", ",".join(props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, unit: str = "clankie") -> str:
        if self.pid is None:
            return self.console.read_text(errors="replace") if self.console.exists() else ""
        done = self.run("journalctl", "--no-pager", "-o", "cat", "-u", unit, check=False, timeout=30)
        return done.stdout + done.stderr

    def host_pids(self) -> list[int]:
        """Host pids of every process in the namespace but systemd itself."""
        assert self.pid is not None
        out: list[int] = []
        stack = [self.pid]
        while stack:
            pid = stack.pop()
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                for task in os.listdir(f"/proc/{pid}/task"):
                    with contextlib.suppress(FileNotFoundError):
                        kids = [int(k) for k in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
                        out.extend(kids)
                        stack.extend(kids)
        return out

    def kill(self) -> None:
        """SIGKILL systemd (the kernel takes the namespace down with it) and remove our cgroup subtree."""
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    self.proc.wait(30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
        if self._cgroup is not None:
            _remove_tree(self._cgroup)


def _remove_tree(cgroup: Path) -> None:
    """rmdir a cgroup subtree, leaves first (a cgroup directory goes only once it holds no process)."""
    if not cgroup.is_dir():
        return
    for root, dirs, _files in os.walk(cgroup, topdown=False):
        for d in dirs:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(root, d))
    with contextlib.suppress(OSError):
        os.rmdir(cgroup)


def _remove_if_abandoned(cgroup: Path) -> None:
    """The subtree of an earlier run of this test that was killed before it could clean up: its test
    process (the pid in the name) is gone and no process is left in it."""
    try:
        owner = int(cgroup.name.split("-")[2])
    except (IndexError, ValueError):
        return
    if Path(f"/proc/{owner}").exists():
        return
    for procs in cgroup.rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            if procs.read_text().strip():
                return
    _remove_tree(cgroup)
