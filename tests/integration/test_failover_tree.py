"""Issue 36 on a real tree: the primary answers 529, the second Anthropic account answers the room, and the second
account's key reaches the service only (never another child's environment, a log, the state dir or a reply)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import psutil
import pytest

from clankie.testing import fake_anthropic as fa
from tests.hardening.test_secrets_scope import environ_of, variable
from tests.integration.tree import real_tree

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

BACKUP_KEY = "sk-backup-route-secret-7777"
NAME = "CLANKIE_BACKUP_KEY"  # a CLANKIE_ name on purpose: the children's allowlist passes CLANKIE_* variables


def test_a_529_primary_fails_over_to_the_backup_and_its_key_stays_in_the_service(tmp_path: Path, runtime_dir: Path) -> None:
    """The room gets its answer from the backup while the primary is down, status shows each route, and the
    backup's key is nowhere but the service's memory."""

    async def main() -> None:
        async with fa.FakeAnthropic(api_key=BACKUP_KEY) as backup:
            routes = [{"name": "backup", "kind": "anthropic", "base_url": backup.base_url, "credential": NAME}]
            env = {"CLANKIE_MODEL_ROUTES": json.dumps(routes), NAME: BACKUP_KEY, "CLANKIE_DISCORD_TOOL_CARD": "false"}
            async with real_tree(tmp_path, runtime_dir, env, spares=False) as t:  # every child looked at: the hosts too
                t.anthropic.respond_with(lambda body: fa.overloaded())
                post = await t.ask("clankie, are you there?")
                assert post.content.startswith("echo:") and len(backup.requests) == 1 and len(t.anthropic.requests) == 1
                service = await t.wait_child(lambda c: "routes primary down" in c.detail, "service")
                assert "backup up 1" in service.detail, service.detail
                assert BACKUP_KEY not in post.content
                supervisor = psutil.Process(t.proc.pid)
                assert BACKUP_KEY.encode() in (environ_of(supervisor.pid) or b"")  # the operator gave it there
                looked = 0
                for proc in supervisor.children(recursive=True):
                    environ = environ_of(proc.pid)
                    if environ is None:
                        continue
                    looked += 1
                    assert BACKUP_KEY.encode() not in environ and variable(environ, f"{NAME}=".encode()) is None, proc.pid
                assert looked >= 4
            assert BACKUP_KEY not in t.stderr()  # every child's log lines pass through the supervisor's stderr
            for path in t.state.rglob("*"):
                if path.is_file() and not path.is_symlink():
                    assert BACKUP_KEY.encode() not in path.read_bytes(), path

    asyncio.run(main())
