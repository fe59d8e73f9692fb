"""``clankie migrate --to postgres``: a files tree's lanes and spend go into PostgreSQL, idempotent, verified, and a
service in the postgres profile then answers with what the room told the files tree (issue 34 item 5)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from clankie.store.leases import tree_holder
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from service.migrate import lane_room
from tests.service.captain.harness import FakeBridge, msg, run, service

REPO = Path(__file__).resolve().parents[3]
CLANKIE = shutil.which("clankie", path=str(Path(sys.executable).parent)) or "clankie"


def migrate(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
    return subprocess.run([CLANKIE, "migrate", "--to", "postgres"], env=full, capture_output=True, text=True,
                          check=False, cwd=REPO, timeout=120)


def counts(dsn: str) -> tuple[int, int, int]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT (SELECT count(*) FROM clankie_lane_segment), (SELECT count(*) FROM clankie_lane_record),"
                           " (SELECT count(*) FROM clankie_spend_line)").fetchone()
    assert row is not None
    return int(str(row[0])), int(str(row[1])), int(str(row[2]))


@pytest.mark.slow
@pytest.mark.timeout(180)  # two `clankie migrate` runs (three Pythons each: the CLI, the service's part, the bridge's)
def test_a_files_trees_memory_moves_to_postgresql_once_and_the_postgres_service_recalls_it(
        env: dict[str, str], postgres_dsn: str, state_dir: Path) -> None:
    """Told a door code in the files profile; migrated (a second run copies nothing); the postgres profile's
    service, with the lane files moved away, answers from the database with the code in the model's context."""
    pg_env = {**env, "CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": postgres_dsn}

    async def told() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.text("noted"))
            async with service(env, fake) as app:
                bridge = FakeBridge()
                await bridge.connect(app)
                assert (await bridge.submit(msg("m1", "remember: the door code is 4711"))).outcome == "settled"

    run(told())
    first = migrate({**env, "CLANKIE_POSTGRES_DSN": postgres_dsn})
    assert first.returncode == 0, first.stderr
    segments, records, lines = counts(postgres_dsn)
    assert segments >= 1 and records >= 3 and lines >= 1  # a header, the message, the answer; the call's spend
    assert f"({segments} segments, {records} records copied)" in first.stdout
    again = migrate({**env, "CLANKIE_POSTGRES_DSN": postgres_dsn})
    assert again.returncode == 0, again.stderr
    assert "(0 segments, 0 records copied); spend: 0 days (0 lines)" in again.stdout
    assert counts(postgres_dsn) == (segments, records, lines)
    with psycopg.connect(postgres_dsn) as conn:
        lease = conn.execute("SELECT holder FROM clankie_shard_lease WHERE shard = '0/1'").fetchone()
    assert lease == (None,)  # the migration handed the shard back

    shutil.move(state_dir / "captain" / "rooms", state_dir / "rooms-moved-away")  # the database alone remembers

    async def asked() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.text("it is 4711"))
            async with service(pg_env, fake) as app:
                bridge = FakeBridge()
                await bridge.connect(app)
                result = await bridge.submit(msg("m2", "what is the door code?"))
                assert (result.outcome, result.text) == ("settled", "it is 4711")
                assert app.pg is not None and app.pg.holder == tree_holder(state_dir)
            assert "remember: the door code is 4711" in json.dumps(fake.requests[-1]["messages"])

    run(asked())


@pytest.mark.timeout(120)
def test_a_shard_held_by_a_running_tree_is_not_migrated_into(env: dict[str, str], postgres_dsn: str) -> None:
    """A tree serving from the database holds the shard: the migration refuses (exit 1) and writes nothing."""
    (Path(env["CLANKIE_STATE"]) / "captain" / "rooms" / "discord%3Aclankie%3Adiscord%3A1%3A2").mkdir(parents=True)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        from clankie.store import database
        database.prepare(postgres_dsn)
        conn.execute("INSERT INTO clankie_shard_lease (shard, holder, epoch, expires_at) "
                     "VALUES ('0/1', 'a-tree', 1, now() + interval '1 hour')")
    done = migrate({**env, "CLANKIE_POSTGRES_DSN": postgres_dsn})
    assert done.returncode == 1 and "shards held by a running tree: 0/1" in done.stderr
    assert counts(postgres_dsn) == (0, 0, 0)


def test_a_lane_directory_names_its_room() -> None:
    assert lane_room("rooms", "discord%3Aclankie%3Adiscord%3A100%3A101").guild_id == "100"
    assert lane_room("system", "discord-system%3Aclankie%3Adiscord%3Adm%3A7%3A9").guild_id is None
    assert lane_room("turns", "discord_presence~100%3A101").channel_id == "101"
