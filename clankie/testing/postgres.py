"""A real PostgreSQL for tests: a throwaway cluster in a temp dir, on a Unix socket of its own, never a mock.

:class:`Cluster` runs Debian's ``initdb`` and ``postgres`` (``/usr/lib/postgresql/<v>/bin``, the newest there, else
the ones on ``PATH``) in a temporary directory: no TCP (``listen_addresses=''``), the socket in that directory, trust
for local connections except for the members of :data:`PASSWORD_GROUP`, who must give a password
(``scram-sha-256``), so a wrong password can be tried against the real server. Durability is off (``fsync``,
``synchronous_commit``, ``full_page_writes``): a test's database lives seconds and speed matters more.

PostgreSQL refuses to run as root, so when the tests run as root (CI) the cluster belongs to the unprivileged
``postgres`` user Debian's package creates, and the processes are started under it; run as anyone else, the cluster is
theirs. The server is started with ``PR_SET_PDEATHSIG`` = SIGQUIT (PostgreSQL's immediate shutdown), so a test process
that dies takes its cluster with it.

The pytest fixtures over it live in ``tests/postgres.py``: one cluster per test session (so one per pytest-xdist
worker) and a fresh database per test. Without PostgreSQL installed they fail with :data:`INSTALL_HINT`: CI installs it
(``scripts/bootstrap``), so a missing server is an error, never a skip.
"""

from __future__ import annotations

import ctypes
import glob
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg import sql

PASSWORD_GROUP = "clankie_password_login"
"""Members of this role must log in with their password; every other local login is trusted."""
SUPERUSER = "postgres"
PORT = 5432  # names the socket file only: no TCP port is opened
START_TIMEOUT = 60.0
SETTINGS = {
    "listen_addresses": "",  # no TCP at all
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "16MB",
    "max_connections": "60",
    "max_wal_senders": "0",
    "wal_level": "minimal",
    "log_min_messages": "warning",
    "logging_collector": "off",
}
INSTALL_HINT = "PostgreSQL is not installed: run scripts/bootstrap (apt-get install -y postgresql), as CI does"

_PR_SET_PDEATHSIG = 1
_names = itertools.count(1)


class PostgresMissing(RuntimeError):
    """Raised when no ``initdb``/``postgres`` can be found (or the ``postgres`` user is missing when run as root)."""


def bin_dir() -> Path:
    """The directory of the newest Debian PostgreSQL's programs, else the one ``initdb`` is in on ``PATH``."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]) if Path(p).parts[4].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise PostgresMissing(INSTALL_HINT)
    return Path(initdb).parent


def _server_user() -> pwd.struct_passwd | None:
    """The user the server runs as: ``postgres`` when we are root, else None (ourselves)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresMissing("running as root needs the unprivileged 'postgres' user that Debian's package creates; "
                              + INSTALL_HINT) from None


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGQUIT, 0, 0, 0)


class Cluster:
    """One PostgreSQL cluster in a temp dir; :meth:`start`, then :meth:`dsn` per database; :meth:`stop` at the end."""

    def __init__(self) -> None:
        self.bin = bin_dir()
        self.user = _server_user()
        self.root = Path(tempfile.mkdtemp(prefix="ck-pg-", dir="/tmp"))
        self.data = self.root / "data"
        self.socket_dir = self.root  # /tmp/ck-pg-XXXXXXXX/.s.PGSQL.5432: far under the 107-byte limit
        self.log = self.root / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        if self.user is not None:
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self.uid = None if self.user is None else self.user.pw_uid
        self.gid = None if self.user is None else self.user.pw_gid
        self.groups: list[int] | None = None if self.user is None else []

    def start(self) -> None:
        """initdb, then the server; returns once it takes connections (or raises with the server's log)."""
        initdb = [str(self.bin / "initdb"), "-D", str(self.data), "-U", SUPERUSER, "--auth-local=trust", "--auth-host=reject",
                  "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"]
        done = subprocess.run(initdb, capture_output=True, text=True, check=False, cwd=self.root,
                              user=self.uid, group=self.gid, extra_groups=self.groups)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        hba = self.data / "pg_hba.conf"
        hba.write_text(f"local all +{PASSWORD_GROUP} scram-sha-256\nlocal all all trust\n", encoding="utf-8")
        if self.user is not None:
            os.chown(hba, self.user.pw_uid, self.user.pw_gid)
        self._launch()
        with self.connect() as conn:
            conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(PASSWORD_GROUP)))

    def _launch(self) -> None:
        """The server on the cluster's data and socket; returns once it takes connections."""
        options: list[str] = []
        for key, value in {**SETTINGS, "unix_socket_directories": str(self.socket_dir), "port": str(PORT)}.items():
            options += ["-c", f"{key}={value}"]
        log = self.log.open("ab")
        try:
            self.proc = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.data), *options], stdout=log, stderr=log,
                stdin=subprocess.DEVNULL, cwd=self.root, preexec_fn=_die_with_parent,
                user=self.uid, group=self.gid, extra_groups=self.groups,
            )
        finally:
            log.close()
        self._wait_ready()

    def halt(self) -> None:
        """Stop the server (fast shutdown: every session cut), keeping its data: the database is down until
        :meth:`resume`. A test of what the tree does without its database."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=30)

    def resume(self) -> None:
        """Start a halted server again, on the same data and socket."""
        if self.proc is None or self.proc.poll() is not None:
            self._launch()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode}: {self.server_log()[-2000:]}")
            try:
                psycopg.connect(self.dsn("postgres"), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"postgres did not take connections in {START_TIMEOUT:.0f}s: {self.server_log()[-2000:]}") from None
                time.sleep(0.02)

    def server_log(self) -> str:
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def dsn(self, dbname: str, user: str = SUPERUSER, password: str | None = None) -> str:
        """A libpq connection string for ``dbname`` on this cluster's socket."""
        parts = {"host": str(self.socket_dir), "port": str(PORT), "user": user, "dbname": dbname}
        if password is not None:
            parts["password"] = password
        return psycopg.conninfo.make_conninfo(**parts)

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[tuple[object, ...]]:
        """An autocommit superuser connection (for setting a test up; the code under test dials its own)."""
        return psycopg.connect(self.dsn(dbname), autocommit=True)

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its name."""
        name = name or f"t{os.getpid()}_{next(_names)}"
        with self.connect() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
        return name

    def drop_database(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def create_password_user(self, name: str, password: str) -> None:
        """A login role that must give ``password`` (scram-sha-256), with every right on the public schema."""
        with self.connect() as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(
                sql.Identifier(name), sql.Literal(password), sql.Identifier(PASSWORD_GROUP)))

    def stop(self) -> None:
        """Stop the server at once (immediate shutdown) and remove the directory."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)
