"""Two real bridges of two trees on one shard, on a real PostgreSQL: the lease decides which one has the gateway
(issue 34 item 3, the first step of a takeover).

Each ``python -m bridge`` is its own tree (its own state directory, so its own lease holder, and its own service
double); both dial the one loopback Discord. The one that holds the shard's lease opens the gateway; the other
waits without an IDENTIFY. A SIGKILLed holder's lease expires on the database's clock and the other takes the shard
(epoch 2), RESUMEs the dead holder's gateway session (kept in the database) and answers. A holder whose lease is
taken from under it (a renew refused) closes its gateway at once, and opens it again once the lease is free again,
RESUMEing the shard's session from the sequence it journaled: Discord replays what was said meanwhile.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from clankie import paths
from clankie.store import database
from clankie.store.leases import tree_holder as holder_id
from clankie.testing.fake_discord import FakeDiscord
from clankie.testing.postgres import Cluster
from tests.bridge.harness import CHAN, GUILD, PERSON, FakeService
from tests.polling import until
from tests.postgres import postgres_cluster, postgres_dsn

__all__ = ["postgres_cluster", "postgres_dsn"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

RENEW, TTL = "0.5", "2.5"  # the least TTL the settings allow for this renew (2 x renew + the 1 s margin), and a bit


@dataclass
class Tree:
    """One bridge process and what it needs: its state, its socket directory, its service double, its stderr."""

    state: Path
    service: FakeService
    err: Path
    proc: asyncio.subprocess.Process

    def log(self) -> str:
        return self.err.read_text(errors="replace")


@asynccontextmanager
async def bridge(root: Path, fake: FakeDiscord, dsn: str, extra: dict[str, str] | None = None) -> AsyncIterator[Tree]:
    state = root / "state"
    state.mkdir(parents=True, mode=0o700)
    with tempfile.TemporaryDirectory(prefix="ck-", dir="/tmp") as rt:  # short: a socket path fits in 107 bytes
        runtime = Path(rt)
        paths.ensure_private_dir(runtime)
        service = FakeService(paths.socket_path(runtime, "service"))
        await service.start()
        env = {"CLANKIE_STATE": str(state), "CLANKIE_RUNTIME_DIR": str(runtime), "HOME": str(state),
               "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DISCORD_TOKEN": fake.token,
               "CLANKIE_DISCORD_API_BASE": fake.api_base, "CLANKIE_DISCORD_GUILD_IDS": GUILD,
               "CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": dsn,
               "CLANKIE_LEASE_RENEW_SECONDS": RENEW, "CLANKIE_LEASE_TTL_SECONDS": TTL, **(extra or {})}
        err = root / "bridge.stderr"
        with err.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bridge", env=env,
                                                        stdout=asyncio.subprocess.DEVNULL, stderr=out)
        try:
            yield Tree(state, service, err, proc)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await service.close()


@asynccontextmanager
async def one_room(dsn: str) -> AsyncIterator[FakeDiscord]:
    """The loopback Discord (one guild, one room) every bridge of a test dials, on a migrated database."""
    database.prepare(dsn)  # what `clankie run` does at start, before its bridge
    fake = FakeDiscord(guilds={GUILD: [CHAN]})
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()


def lease(dsn: str) -> tuple[str | None, int]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT holder, epoch FROM clankie_shard_lease WHERE shard = '0/1'").fetchone()
    assert row is not None
    return (None if row[0] is None else str(row[0])), int(row[1])


def execute(dsn: str, sql: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.encode())


def test_the_lease_holder_alone_has_the_gateway_a_dead_ones_shard_is_taken_and_a_fenced_one_steps_back(
        tmp_path: Path, postgres_dsn: str) -> None:
    """A holds 0/1 and answers; B waits with no IDENTIFY. A is SIGKILLed: B takes the shard at epoch 2 once A's lease
    expires, RESUMEs A's session (no IDENTIFY) and answers. The lease is then taken from B (another holder at epoch 3):
    B's renew is refused and its gateway closes; once the lease is free, B takes it (epoch 4) and RESUMEs the shard's
    session from the sequence it journaled: Discord replays what was said meanwhile, and B answers it once."""

    async def main() -> None:
        async with one_room(postgres_dsn) as fake:
            async with bridge(tmp_path / "a", fake, postgres_dsn) as a:
                await until(lambda: fake.readies == 1, 30, "A's gateway session")
                assert lease(postgres_dsn) == (holder_id(a.state), 1)
                async with bridge(tmp_path / "b", fake, postgres_dsn) as b:
                    await until(lambda: "held by another tree" in b.log(), 30, "B told the shard is A's")
                    assert fake.identifies == 1  # B has not opened a gateway session
                    first = str((await fake.message(CHAN, "clankie, who answers?", author_id=PERSON))["id"])
                    await until(lambda: len(fake.posts_in(CHAN)) == 1, 30, "A's answer")
                    assert [s.delivery_id for s in a.service.submits] == [first] and b.service.submits == []

                    a.proc.send_signal(signal.SIGKILL)  # a dead machine: its lease is left to expire
                    await a.proc.wait()
                    await until(lambda: fake.resumes == 1, 30, "B's RESUME of A's session")
                    assert (fake.identifies, list(fake.resumed)) == (1, ["session-1"])
                    assert lease(postgres_dsn) == (holder_id(b.state), 2)
                    second = str((await fake.message(CHAN, "clankie, and now?", author_id=PERSON))["id"])
                    await until(lambda: len(fake.posts_in(CHAN)) == 2, 30, "B's answer")
                    assert [s.delivery_id for s in b.service.submits] == [second]

                    # another tree takes the shard from B (as after a pause past its TTL): B must step back at once
                    execute(postgres_dsn, "UPDATE clankie_shard_lease SET holder = 'elsewhere', epoch = epoch + 1, "
                                          "expires_at = now() + interval '1 hour'")
                    await until(lambda: "lease no longer ours" in b.log(), 30, "B's refused renew")
                    await until(lambda: fake.gateway.shards() == [], 30, "B's gateway closed")
                    gap = str((await fake.message(CHAN, "clankie, anyone?", author_id=PERSON))["id"])
                    assert fake.identifies == 1

                    execute(postgres_dsn, "UPDATE clankie_shard_lease SET holder = NULL, expires_at = '-infinity'")
                    await until(lambda: len(fake.posts_in(CHAN)) == 3, 30, "the gap answered once the lease is free")
                    # taken anew at another epoch: the shard's session, as its last holder (B) left it in the database,
                    # is RESUMEd from the sequence B journaled; Discord replays the gap alone
                    assert (fake.identifies, list(fake.resumed)) == (1, ["session-1", "session-1"])
                    assert [s.delivery_id for s in b.service.submits] == [second, gap]
                    assert lease(postgres_dsn) == (holder_id(b.state), 4)

                    b.proc.send_signal(signal.SIGTERM)  # a bridge stopped alone leaves the lease to its tree's service
                    assert await b.proc.wait() == 0
                    assert lease(postgres_dsn) == (holder_id(b.state), 4)

    asyncio.run(main())


def test_without_its_database_the_bridge_stops_admitting_and_answers_the_gap_once_it_is_back(
        tmp_path: Path, postgres_cluster: Cluster, postgres_dsn: str) -> None:
    """PostgreSQL stopped under a serving bridge: its renews fail, and before its lease can expire on the database it
    closes its gateway (nothing admitted that another tree might also admit); a message said meanwhile waits with
    Discord. The database back, the bridge takes the lease again and answers it once."""

    async def main() -> None:
        async with one_room(postgres_dsn) as fake:
            async with bridge(tmp_path / "a", fake, postgres_dsn) as a:
                await until(lambda: fake.readies == 1, 30, "A's gateway session")
                first = str((await fake.message(CHAN, "clankie, before", author_id=PERSON))["id"])
                await until(lambda: len(fake.posts_in(CHAN)) == 1, 30, "the answer before")
                postgres_cluster.halt()
                try:
                    await until(lambda: "lease no longer ours" in a.log(), 30, "A's lease deadline")
                    await until(lambda: fake.gateway.shards() == [], 30, "A's gateway closed")
                    during = str((await fake.message(CHAN, "clankie, while the database is down", author_id=PERSON))["id"])
                    assert len(fake.posts_in(CHAN)) == 1 and [s.delivery_id for s in a.service.submits] == [first]
                finally:
                    postgres_cluster.resume()
                await until(lambda: len(fake.posts_in(CHAN)) == 2, 60, "the message said during the outage answered")
                assert [s.delivery_id for s in a.service.submits] == [first, during]
                # the shard's session, as A left it in the database, RESUMEd: Discord replays the gap
                assert (fake.identifies, fake.resumes) == (1, 1)
                # A's again: at epoch 1 if it was back before the lease expired on the database's clock (the local
                # deadline comes a margin earlier), else at epoch 2
                assert lease(postgres_dsn)[0] == holder_id(a.state)

    asyncio.run(main())


def test_a_bridge_paused_past_its_lease_wakes_and_admits_nothing_the_other_tree_answered(
        tmp_path: Path, postgres_dsn: str) -> None:
    """A serves and is SIGSTOPped (a hung VM); its socket stays open, so Discord goes on sending it the room's
    messages. B takes the shard once A's lease expires and answers one. A is SIGCONTed: the message waiting in its
    socket is read before its keeper's timer says the lease is gone, and is not admitted (past the local deadline);
    A's gateway closes. The message has one answer, B's; A submitted nothing after its pause."""

    async def main() -> None:
        async with one_room(postgres_dsn) as fake:
            async with bridge(tmp_path / "a", fake, postgres_dsn) as a:
                await until(lambda: fake.readies == 1, 30, "A's gateway session")
                async with bridge(tmp_path / "b", fake, postgres_dsn) as b:
                    await until(lambda: "held by another tree" in b.log(), 30, "B standing by")
                    a.proc.send_signal(signal.SIGSTOP)
                    try:
                        # B RESUMEs the shard's session (A's, still open in A's paused socket) once A's lease expired
                        await until(lambda: fake.resumes == 1, 30, "B's gateway session once A's lease expired")
                        said = str((await fake.message(CHAN, "clankie, who is awake?", author_id=PERSON))["id"])
                        await until(lambda: len(fake.posts_in(CHAN)) == 1, 30, "B's answer")
                    finally:
                        a.proc.send_signal(signal.SIGCONT)
                    await until(lambda: "lease no longer ours" in a.log(), 30, "A noticing its lease is gone")
                    a.proc.send_signal(signal.SIGTERM)
                    assert await a.proc.wait() == 0  # A's last word is in: its submits and its journal are final
                    assert "not admitted" in a.log()
                    assert a.service.submits == [] and [s.delivery_id for s in b.service.submits] == [said]
                    assert len(fake.posts_in(CHAN)) == 1
                    assert lease(postgres_dsn) == (holder_id(b.state), 2)

    asyncio.run(main())


def test_a_lost_lease_takes_only_its_shard_out_of_the_gateway_and_the_others_go_on(tmp_path: Path,
                                                                                  postgres_dsn: str) -> None:
    """A bridge on shards 0 and 1 of 2 loses shard 1's lease (another tree took it): the gateway opens again on shard
    0 alone, RESUMEd, and shard 0's room is answered meanwhile; shard 1's question stays with Discord and is answered
    once the lease is back, replayed by the RESUME of shard 1's session. No IDENTIFY after the first two."""
    g0, g1 = str(1000 << 22), str(1001 << 22)
    c0, c1 = "4194304101", "4194304201"

    def running(fake: FakeDiscord) -> list[int]:
        return sorted(shard[0] for shard in fake.shards_connected() if shard is not None)

    def sessions() -> list[str]:
        with psycopg.connect(postgres_dsn) as conn:
            return sorted(str(r[0]) for r in conn.execute("SELECT shard FROM clankie_gateway_session").fetchall())

    def holders() -> dict[str, str | None]:
        with psycopg.connect(postgres_dsn) as conn:
            return {str(r[0]): r[1] for r in conn.execute("SELECT shard, holder FROM clankie_shard_lease").fetchall()}

    async def main() -> None:
        database.prepare(postgres_dsn)
        fake = FakeDiscord(guilds={g0: [c0], g1: [c1]}, shards=2)
        await fake.start()
        try:
            extra = {"CLANKIE_DISCORD_GUILD_IDS": f"{g0},{g1}", "CLANKIE_DISCORD_SHARD_COUNT": "2"}
            async with bridge(tmp_path / "a", fake, postgres_dsn, extra) as a:
                await until(lambda: running(fake) == [0, 1], 30, "both shards' sessions")
                await until(lambda: sessions() == ["0/2", "1/2"], 30, "both sessions kept in the database")
                me = holder_id(a.state)
                assert holders() == {"0/2": me, "1/2": me} and fake.identifies == 2
                execute(postgres_dsn, "UPDATE clankie_shard_lease SET holder = 'elsewhere', epoch = epoch + 1, "
                                      "expires_at = now() + interval '1 hour' WHERE shard = '1/2'")
                await until(lambda: "shard 1/2: lease no longer ours" in a.log(), 30, "shard 1's refused renew")
                await until(lambda: running(fake) == [0], 30, "the gateway on shard 0 alone")
                there = str((await fake.message(c1, "clankie, anyone on shard 1?", author_id=PERSON))["id"])
                here = str((await fake.message(c0, "clankie, shard 0?", author_id=PERSON))["id"])
                await until(lambda: len(fake.posts_in(c0)) == 1, 30, "shard 0's room answered")
                assert [s.delivery_id for s in a.service.submits] == [here] and fake.posts_in(c1) == []

                execute(postgres_dsn, "UPDATE clankie_shard_lease SET holder = NULL, expires_at = '-infinity' "
                                      "WHERE shard = '1/2'")
                await until(lambda: len(fake.posts_in(c1)) == 1, 30, "shard 1's question answered once it is back")
                assert running(fake) == [0, 1] and fake.identifies == 2  # every reopening RESUMEd
                assert [s.delivery_id for s in a.service.submits] == [here, there]
        finally:
            await fake.close()

    asyncio.run(main())
