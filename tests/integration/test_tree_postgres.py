"""A tree in the PostgreSQL profile (``CLANKIE_STORE=postgres``, issue 34): it boots on a real database and answers,
and the DSN reaches only the children that keep durable state (the service and the bridge), on their secrets pipes.

The hosts keep nothing durable: they get neither the DSN nor the store's settings, so they read the files profile
and need no database (before, every child read ``CLANKIE_STORE=postgres`` without a DSN and exited 78 at once).
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import psutil
import pytest

from clankie.store.leases import tree_holder
from supervisor.ctl_render import format_status
from tests.hardening.test_secrets_scope import environ_of, variable
from tests.integration.tree import real_tree
from tests.postgres import lease_row, postgres_cluster, postgres_dsn

__all__ = ["postgres_cluster", "postgres_dsn"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

STORE_KEEPERS = (["-m", "service"], ["-m", "bridge"])


def test_a_postgres_tree_answers_and_only_the_service_and_the_bridge_are_handed_the_dsn(
        tmp_path: Path, runtime_dir: Path, postgres_dsn: str) -> None:
    """Every child and spare runs; the service and the bridge (and their spares) read ``postgres`` and hold no DSN
    in their environment; the hosts and what they start read no store setting at all. The service and the bridge
    keep the shard's one lease under the tree's name; a SIGKILLed bridge's spare takes it at once, epoch kept."""

    async def main() -> None:
        env = {"CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": postgres_dsn, "CLANKIE_DISCORD_TOOL_CARD": "false"}
        async with real_tree(tmp_path, runtime_dir, env) as t:
            post = await t.ask("clankie, are you there?")
            assert post.content
            await t.wait_child(lambda c: c.spare.startswith("parked"), "bridge", 60)
            seen: dict[str, list[bytes | None]] = {}
            for proc in psutil.Process(t.proc.pid).children(recursive=True):
                environ = environ_of(proc.pid)
                try:
                    argv = proc.cmdline()
                except psutil.NoSuchProcess:
                    continue
                if environ is None:
                    continue
                assert postgres_dsn.encode() not in environ, argv[:3]
                assert variable(environ, b"CLANKIE_POSTGRES_DSN=") is None, argv[:3]
                seen.setdefault(" ".join(argv[1:3]), []).append(variable(environ, b"CLANKIE_STORE="))
            for keeper in STORE_KEEPERS:
                assert seen[" ".join(keeper)] == [b"postgres", b"postgres"], seen  # the child and its spare
            hosts = {k: v for k, v in seen.items() if k.split(" ")[1:] not in (["service"], ["bridge"])}
            assert "-m hosts.browser" in hosts and "-m hosts.tldraw" in hosts, seen
            assert all(store is None for stores in hosts.values() for store in stores), hosts

            # the operator's view: the store (never the password), the lease on the bridge's row
            shown = format_status(await t.status(), 0.0)
            assert "store: postgres (" in shown and "dbname=" in shown and "leases: 0/1 held (epoch 1)" in shown
            # the tree's one lease: its service and its bridge hold it under the tree's name, at one epoch
            assert lease_row(postgres_dsn) == (tree_holder(t.state), 1)
            bridge = await t.wait_child(lambda c: "leases: 0/1 held (epoch 1)" in c.detail, "bridge", 30)
            # a killed bridge's spare is the same holder: it takes the live lease at once, the epoch kept
            assert bridge.pid is not None
            os.kill(bridge.pid, signal.SIGKILL)
            await t.wait_child(lambda c: c.pid not in (None, bridge.pid) and "discord: connected" in c.detail, "bridge", 60)
            assert lease_row(postgres_dsn) == (tree_holder(t.state), 1)
            again = await t.ask("clankie, still there?")
            assert again.content

    asyncio.run(main())
