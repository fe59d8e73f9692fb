"""``clankie run`` (and ``python -m supervisor``): the supervisor, in the foreground.

No daemonizing and no pidfile: systemd (``Type=notify``) or a terminal owns
the process. Exit status: 0 after an orderly stop, 78 for a configuration
error (bad settings, unusable runtime dir, a live supervisor already on the
control socket), 1 for anything else.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from clankie import heap, logs
from clankie.child import make_undumpable
from clankie.clock import SystemClock
from clankie.errors import EX_CONFIG, ConfigError
from clankie.logs import stderr_is_journal
from clankie.paths import child_log_dir, ensure_private_dir, process_environment, socket_path
from clankie.redact import Redactor
from clankie.settings import Settings, load
from clankie.version import describe
from supervisor import dbcli, selflog
from supervisor.control import Control
from supervisor.forward import StderrQueue, route_logging
from supervisor.spec import ChildSpec, default_specs, load_spec_file, spares_kept
from supervisor.systemd import Notifier
from supervisor.tree import Tree
from supervisor.treestate import STOP_BUDGET

log = logging.getLogger(__name__)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clankie", description="Run the Clankie process tree in the foreground.")
    sub = p.add_subparsers(dest="command")
    p.add_argument("--version", action="version", version=describe())
    run = sub.add_parser("run", help="start the supervisor and its children (the default)")
    for target in (p, run):
        target.add_argument("--spec-file", type=Path, help=argparse.SUPPRESS)
        target.add_argument("--stop-budget", type=float, default=STOP_BUDGET, help="seconds the ordered stop may take")
    db = sub.add_parser("db", help="the PostgreSQL profile's database (docs/multi-machine.md)")
    db.add_argument("action", choices=["upgrade", "status"],
                    help="upgrade: apply the schema migrations the database lacks; status: the schema and each shard's lease")
    db.add_argument("--json", action="store_true", help="status as JSON")
    migrate = sub.add_parser("migrate", help="copy this tree's file state (lanes, spend, the bridge's dedupe memory "
                                              "and open deliveries) into PostgreSQL")
    migrate.add_argument("--to", choices=["postgres"], required=True, help="the store to copy into")
    return p


MIGRATING = ("service", "bridge")
"""The packages whose files ``clankie migrate`` copies, in order, each by its own ``<package>.migrate`` process: the
file adapters are theirs (never imported here)."""


def _migrate(to: str) -> int:
    """Each package's part in turn, its summary joined into one line; the worst exit status (a part that exits 78 or
    2, a setting or a usage wrong, stops the run: the next would fail alike)."""
    summary: list[str] = []
    worst = 0
    for package in MIGRATING:
        done = subprocess.run([sys.executable, "-m", f"{package}.migrate", "--to", to], check=False,
                              stdout=subprocess.PIPE, text=True)
        summary += [line for line in done.stdout.splitlines() if line.strip()]
        worst = max(worst, done.returncode)
        if done.returncode not in (0, 1):
            break
    if summary:
        print("; ".join(summary), flush=True)
    return worst


async def _serve(settings: Settings, specs: list[ChildSpec], stop_budget: float, stderr: StderrQueue) -> int:
    loop = asyncio.get_running_loop()
    tree = Tree(
        settings, specs, clock=SystemClock(), env=process_environment(), notifier=Notifier(process_environment()), stop_budget=stop_budget,
        stderr=stderr,
    )
    control = Control(tree)
    await control.start(socket_path(settings.runtime_dir, "control"))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, tree.request_stop)
    try:
        await tree.run()
    finally:
        await control.close()
        stderr.detach()
    log.info("stopped")
    return 0


def prepare_directories(settings: Settings) -> None:
    """Check (or create, 0700) every directory the tree writes; a bad one is a ConfigError (exit 78).

    The state dir, the runtime dir and the attachment root may be named by
    the operator: an existing one is checked, never chmodded (see
    :func:`clankie.paths.ensure_private_dir`).
    """
    ensure_private_dir(settings.state_dir)
    ensure_private_dir(child_log_dir(settings.state_dir))
    ensure_private_dir(settings.runtime_dir)
    ensure_private_dir(settings.attachment_root)


def stderr_queue(settings: Settings, fd: int = 2) -> StderrQueue:
    """The supervisor's stderr queue, holding at most ``CLANKIE_STDERR_QUEUE_BYTES`` of unwritten lines."""
    return StderrQueue(fd, max_bytes=settings.stderr_queue_bytes)


def main(argv: Sequence[str] | None = None) -> int:
    make_undumpable()  # its environment holds the secrets outside systemd: closed to same-uid processes
    args = _parser().parse_args(argv)
    os.umask(0o077)  # everything the tree creates (children, Chromium's profile included) is ours alone
    stderr: StderrQueue | None = None
    own_log: selflog.FileHandler | None = None
    if args.command == "db":
        return dbcli.main(args.action, as_json=args.json)
    if args.command == "migrate":
        return _migrate(args.to)
    try:
        settings = load()
        redact = Redactor.of(settings)
        logs.configure("supervisor", settings.log_level, redact=redact)
        stderr = stderr_queue(settings)  # our log records and the children's lines: never a blocking write
        route_logging(stderr)
        prepare_directories(settings)
        dbcli.prepare_store(settings)  # the postgres profile: reachable, migrated, not newer than us (else exit 78)
        if not stderr_is_journal(process_environment()):  # the journal keeps our lines under systemd; else a file
            own_log = selflog.keep(settings.state_dir, settings.child_log_rotate_bytes, settings.child_log_backups, redact)
        log.info("%s", describe())
        if args.spec_file is not None:
            specs = load_spec_file(args.spec_file)
        else:
            spares = spares_kept(settings.spares, bridge_spare=settings.bridge_spare)
            specs, missing = default_specs(browser=settings.browser_host, spares=spares, store=settings.store,
                                           hosts=settings.hosts)
            if settings.external_browser:
                log.info("the browser host runs in its own unit; the service dials %s", settings.browser_socket)
            if missing:
                log.warning("not starting %s: package has no __main__ yet", ", ".join(missing))
        heap.settle()  # started: what the imports built is frozen, never walked by a collection again (clankie/heap.py)
        return asyncio.run(_serve(settings, specs, args.stop_budget, stderr))
    except ConfigError as exc:
        print(f"clankie: {exc}", file=sys.stderr, flush=True)
        return EX_CONFIG
    finally:
        if own_log is not None:
            logging.getLogger().removeHandler(own_log)
            own_log.close()
        if stderr is not None:
            stderr.drain(timeout=1.0)  # bounded: a wedged stderr cannot hold up the exit


if __name__ == "__main__":
    sys.exit(main())
