"""Fenced shard leases on a real PostgreSQL: one winner, takeover after the TTL with the next epoch, the paused
holder's late write refused and counted, release handing the shard over at once, and a holder that cannot renew
reporting the lease lost while the database still holds it for it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import psycopg
import pytest

from clankie.metrics import METER
from clankie.store import database
from clankie.store.database import Pool
from clankie.store.lease import Action, Kind, LeaseState
from clankie.store.leases import Fence, LeaseKeeper, PgLeases, StaleEpoch, Want, shard_name
from clankie.testing.clock import FakeClock
from tests.polling import until, until_probe

REPO = Path(__file__).resolve().parents[3]
SHARD = "0/2"


@asynccontextmanager
async def leases_on(dsn: str, ttl: float = 6.0) -> AsyncIterator[PgLeases]:
    pool: Pool = await database.open_pool(dsn, ttl=ttl)
    try:
        yield PgLeases(pool)
    finally:
        await pool.close()


async def write_dedupe(leases: PgLeases, fence: Fence, message_id: str) -> None:
    async with leases.fenced(fence) as conn:
        await conn.execute("INSERT INTO clankie_dedupe (message_id, shard, fingerprint, expires, written_epoch) "
                           "VALUES (%s, %s, 0, 0, %s)", (message_id, fence.shard, fence.epoch))


def rows(dsn: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql.encode()).fetchall()


@pytest.fixture
def dsn(postgres_dsn: str) -> str:
    database.prepare(postgres_dsn)
    return postgres_dsn


def state_of(keeper: LeaseKeeper) -> LeaseState:
    return keeper.lease.state


def fence_of(keeper: LeaseKeeper) -> Fence | None:
    return keeper.fence


def test_a_shard_is_named_by_its_id_and_count() -> None:
    assert shard_name(1, 4) == "1/4"
    with pytest.raises(ValueError):
        shard_name(4, 4)


def test_two_holders_contend_and_exactly_one_wins(dsn: str) -> None:
    """Ten trees reach for a free shard at once: one gets epoch 1, the others nothing."""
    async def main() -> list[int | None]:
        async with leases_on(dsn) as leases:
            return list(await asyncio.gather(*(leases.acquire(SHARD, f"tree-{i}", 6.0) for i in range(10))))

    got = asyncio.run(main())
    assert sorted(got, key=lambda e: e or 0) == [None] * 9 + [1]
    winner = f"tree-{got.index(1)}"
    assert rows(dsn, "SELECT holder, epoch FROM clankie_shard_lease") == [(winner, 1)]


def test_a_held_lease_is_renewed_only_by_its_holder_at_its_epoch(dsn: str) -> None:
    async def main() -> tuple[bool, bool, bool, int | None]:
        async with leases_on(dsn) as leases:
            epoch = await leases.acquire(SHARD, "a", 6.0)
            assert epoch == 1
            return (await leases.renew(Fence(SHARD, "a", 1), 6.0), await leases.renew(Fence(SHARD, "b", 1), 6.0),
                    await leases.renew(Fence(SHARD, "a", 2), 6.0), await leases.acquire(SHARD, "b", 6.0))

    assert asyncio.run(main()) == (True, False, False, None)


def test_a_write_with_the_live_epoch_commits_and_one_with_a_stale_epoch_is_refused_and_counted(dsn: str) -> None:
    """The fence is checked inside the write's transaction: the stale one writes nothing and is counted."""
    async def main() -> int:
        async with leases_on(dsn) as leases:
            assert await leases.acquire(SHARD, "a", 6.0) == 1
            await write_dedupe(leases, Fence(SHARD, "a", 1), "100")
            assert await leases.release(Fence(SHARD, "a", 1))
            assert await leases.acquire(SHARD, "b", 6.0) == 2
            with pytest.raises(StaleEpoch):
                await write_dedupe(leases, Fence(SHARD, "a", 1), "101")
            with pytest.raises(StaleEpoch):
                await write_dedupe(leases, Fence(SHARD, "a", 2), "102")  # the right epoch, the wrong holder
            await write_dedupe(leases, Fence(SHARD, "b", 2), "103")
            return leases.stale_writes

    assert asyncio.run(main()) == 2
    assert rows(dsn, "SELECT message_id, written_epoch FROM clankie_dedupe ORDER BY message_id") == [("100", 1), ("103", 2)]


def test_release_hands_the_shard_over_at_once_with_the_next_epoch(dsn: str) -> None:
    """A handback does not wait for the TTL: the next tree's acquire right after the release gets epoch 2."""
    async def main() -> tuple[int | None, int | None]:
        async with leases_on(dsn) as leases:
            await leases.acquire(SHARD, "a", 600.0)
            blocked = await leases.acquire(SHARD, "b", 600.0)
            assert await leases.release(Fence(SHARD, "a", 1))
            return blocked, await leases.acquire(SHARD, "b", 600.0)

    assert asyncio.run(main()) == (None, 2)


def test_the_same_tree_takes_its_own_live_lease_at_once_at_the_same_epoch_and_another_tree_is_kept_out(dsn: str) -> None:
    """A tree's service and bridge (and a restarted bridge) are one holder: an acquire of its own live lease does not
    wait for the TTL and keeps the epoch, so the other writer's fence stays good; once freed, the next take raises it."""
    async def main() -> tuple[int | None, int | None, int | None, int | None]:
        async with leases_on(dsn) as leases:
            first = await leases.acquire(SHARD, "a", 600.0)
            again = await leases.acquire(SHARD, "a", 600.0)
            await write_dedupe(leases, Fence(SHARD, "a", 1), "200")  # the first writer's fence still holds
            other = await leases.acquire(SHARD, "b", 600.0)
            assert await leases.release(Fence(SHARD, "a", 1))
            return first, again, other, await leases.acquire(SHARD, "a", 600.0)

    assert asyncio.run(main()) == (1, 1, None, 2)


def test_a_paused_holder_loses_the_shard_after_the_ttl_and_its_late_write_is_refused(dsn: str) -> None:
    """A real holder process is SIGSTOPped: after its lease expires on the database another tree takes the shard with
    epoch 2; woken, the paused holder's write with epoch 1 is refused and counted, and only the new holder's lands."""
    # renew 0.5 s, TTL 6 s: a window of 5 s, so a loaded machine does not lose the lease before the pause
    cmd = [sys.executable, "-m", "tests.clankie.store.lease_child", dsn, SHARD, "paused-tree", "0.5", "6.0"]
    with subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1) as child:
        try:
            _pause_and_take_over(child, dsn)
        finally:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
    assert rows(dsn, "SELECT message_id, written_epoch FROM clankie_dedupe ORDER BY message_id") == [("200", 1), ("202", 2)]
    assert rows(dsn, "SELECT holder, epoch FROM clankie_shard_lease") == [("other-tree", 2)]


def _pause_and_take_over(child: subprocess.Popen[str], dsn: str) -> None:
    assert child.stdin is not None and child.stdout is not None
    assert child.stdout.readline().strip() == "serve 1"
    child.stdin.write("write 200\n")
    assert child.stdout.readline().strip() == "written 200"
    os.kill(child.pid, signal.SIGSTOP)
    child.stdin.write("write 201\n")  # a write under way when it was paused: it goes on when the process wakes

    async def take_over() -> int:
        async with leases_on(dsn) as leases:
            async def attempt() -> int | None:
                return await leases.acquire(SHARD, "other-tree", 6.0)
            epoch = await until_probe(attempt, timeout=30, what="the paused tree's lease to expire", step=0.1)
            await write_dedupe(leases, Fence(SHARD, "other-tree", epoch), "202")
            return epoch

    assert asyncio.run(take_over()) == 2
    os.kill(child.pid, signal.SIGCONT)
    lines = [child.stdout.readline().strip() for _ in range(2)]
    assert "refused 201 1" in lines, lines
    assert "stop deadline" in lines or "stop taken" in lines, lines


def test_a_holder_paused_inside_a_write_cannot_block_the_takeover(dsn: str) -> None:
    """SIGSTOPped with a fenced write's transaction open (its lock on the lease row held): the server ends the idle
    session after the TTL, the other tree takes the shard, and the paused write never commits."""
    # renew 0.5 s, TTL 6 s: a window of 5 s, so a loaded machine does not lose the lease before the pause
    cmd = [sys.executable, "-m", "tests.clankie.store.lease_child", dsn, SHARD, "paused-tree", "0.5", "6.0"]
    with subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1) as child:
        assert child.stdin is not None and child.stdout is not None
        try:
            assert child.stdout.readline().strip() == "serve 1"
            child.stdin.write("hold 301\n")
            assert child.stdout.readline().strip() == "holding 301"
            os.kill(child.pid, signal.SIGSTOP)

            async def take_over() -> int:
                async with leases_on(dsn) as leases:
                    async def attempt() -> int | None:
                        try:
                            return await leases.acquire(SHARD, "other-tree", 6.0)
                        except psycopg.errors.LockNotAvailable:
                            return None
                    return await until_probe(attempt, timeout=30, what="the takeover past the paused write", step=0.1)

            assert asyncio.run(take_over()) == 2
            os.kill(child.pid, signal.SIGCONT)
            child.stdin.write("commit 301\n")
            lines = [child.stdout.readline().strip() for _ in range(2)]
            assert any(line.startswith("lost 301") for line in lines), lines
        finally:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
    assert rows(dsn, "SELECT message_id FROM clankie_dedupe") == []
    assert rows(dsn, "SELECT holder, epoch FROM clankie_shard_lease") == [("other-tree", 2)]


def test_a_holder_whose_renew_hangs_reports_lost_while_the_database_still_holds_its_lease(dsn: str) -> None:
    """The keeper's renew waits on a row lock another session holds (a real hang on the real server); at the local
    deadline on its clock it stops serving, and the database's expiry is still ahead: nobody else could be in yet."""
    clock = FakeClock()
    seen: list[Action] = []

    async def main() -> None:
        async with leases_on(dsn, ttl=6.0) as leases:
            keeper = LeaseKeeper(leases, SHARD, "hung-tree", clock, renew=2.0, ttl=6.0, on_action=seen.append)
            await keeper.step()
            assert seen == [Action(Kind.SERVE, 1)] and keeper.fence == Fence(SHARD, "hung-tree", 1)
            with psycopg.connect(dsn) as blocker:  # holds the row until the end of the block: the renew waits on it
                blocker.execute("SELECT 1 FROM clankie_shard_lease FOR UPDATE")
                clock.advance(2.0)
                stepping = asyncio.create_task(keeper.step())  # the renew is due and goes out, and hangs
                await until_probe(lambda: _waiting_on_lock(dsn), timeout=30, what="the renew to wait on the row lock")
                assert state_of(keeper) is LeaseState.RENEWING and keeper.fence is not None
                clock.advance(3.0)  # the local deadline: 0 + 6 - 1 = 5 s after the acquire began
                await stepping
                assert seen[-1] == Action(Kind.STOP_SERVING, 1, "deadline")
                assert (fence_of(keeper), state_of(keeper)) == (None, LeaseState.LOST)
                still = blocker.execute("SELECT expires_at > now() FROM clankie_shard_lease").fetchone()
                assert still == (True,), "the holder gave the shard up before the database would let anyone take it"
                blocker.rollback()

    asyncio.run(main())


async def _waiting_on_lock(dsn: str) -> bool:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cur = await conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%UPDATE clankie_shard_lease%'")
        row = await cur.fetchone()
        return row is not None and row[0] == 1


def test_a_host_that_slept_past_its_deadline_stops_serving_when_it_wakes(dsn: str) -> None:
    """Suspend stops the monotonic clock but not the database's: the keeper counts boottime, so on waking it sees
    its deadline gone and stops serving before anything else."""
    clock = FakeClock()
    seen: list[Action] = []

    async def main() -> None:
        async with leases_on(dsn) as leases:
            keeper = LeaseKeeper(leases, SHARD, "sleepy-tree", clock, renew=2.0, ttl=6.0, on_action=seen.append)
            await keeper.step()
            clock.suspend(60.0)
            await keeper.step()
            assert seen == [Action(Kind.SERVE, 1), Action(Kind.STOP_SERVING, 1, "deadline")]
            assert fence_of(keeper) is None

    asyncio.run(main())


def test_a_keeper_takes_a_free_shard_renews_it_and_releases_it(dsn: str) -> None:
    """Acquire, a renew each period on its clock, and a release that frees the row for the next tree at once."""
    clock = FakeClock()
    seen: list[Action] = []

    async def main() -> None:
        async with leases_on(dsn) as leases:
            keeper = LeaseKeeper(leases, SHARD, "tree-a", clock, renew=2.0, ttl=6.0, on_action=seen.append)
            await keeper.step()
            clock.advance(2.0)
            await keeper.step()
            assert (state_of(keeper), keeper.lease.deadline) == (LeaseState.HELD, clock.monotonic() + 5.0)
            await keeper.release()
            assert seen == [Action(Kind.SERVE, 1), Action(Kind.STOP_SERVING, 1, "released")]
            assert state_of(keeper) is LeaseState.RELEASED
            assert await leases.acquire(SHARD, "tree-b", 6.0) == 2

    asyncio.run(main())


def test_a_keeper_waiting_out_another_tree_joins_its_own_trees_lease_when_asked_not_at_its_next_period(dsn: str) -> None:
    """The service's keeper found the shard held by another tree and sleeps a renew period; the tree's bridge takes
    the shard once that lease is gone. A message for the shard asks the keeper to serve: it tries at once and joins
    its tree's lease at the bridge's epoch, though its clock never moved."""
    clock = FakeClock()

    async def main() -> None:
        async with leases_on(dsn) as leases:
            assert await leases.acquire(SHARD, "other-tree", 6.0) == 1
            keeper = LeaseKeeper(leases, SHARD, "our-tree", clock, renew=2.0, ttl=6.0)
            started = clock.monotonic()
            running = asyncio.create_task(keeper.run())
            try:
                await until(lambda: state_of(keeper) is LeaseState.UNHELD and clock.sleepers == 1, 10,
                            "the keeper waiting out its renew period")
                assert keeper.fence is None
                await leases.release(Fence(SHARD, "other-tree", 1))
                assert await leases.acquire(SHARD, "our-tree", 6.0) == 2  # our bridge takes it
                assert await keeper.served(6.0) == Fence(SHARD, "our-tree", 2)
                assert clock.monotonic() == started  # asked, not woken by its period
            finally:
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running

    asyncio.run(main())


def test_only_a_shard_taken_from_another_trees_expired_lease_is_a_takeover_and_the_row_says_from_whom(dsn: str) -> None:
    """A tree taking back its own expired lease, or taking a released one, is no takeover; taking one another tree
    let expire is: counted once in ``clankie_lease_takeovers_total`` and kept on the row for ``clankie db status``."""

    def takeovers() -> float:
        report = METER.report()
        assert report is not None
        return sum(s.value for s in report.counters.get("clankie_lease_takeovers_total", ()))

    async def expired(leases: PgLeases) -> bool:
        return all(r.expires_in < 0 for r in await leases.rows())

    async def main() -> None:
        async with leases_on(dsn) as leases:
            assert await leases.acquire(SHARD, "a", 0.05) == 1
            await until_probe(lambda: expired(leases), 10, "a's lease expired")
            assert await leases.acquire(SHARD, "a", 0.05) == 2  # its own, back: no takeover
            assert (takeovers(), (await leases.rows())[0].taken_from) == (0.0, None)
            await until_probe(lambda: expired(leases), 10, "a's lease expired again")
            assert await leases.acquire(SHARD, "b", 600.0) == 3  # a's, expired: a takeover
            row = (await leases.rows())[0]
            assert (takeovers(), row.taken_from) == (1.0, "a") and row.taken_ago is not None and 0 <= row.taken_ago < 60
            assert await leases.acquire(SHARD, "b", 600.0) == 3 and takeovers() == 1.0  # b joining its own: no second
            assert await leases.release(Fence(SHARD, "b", 3))
            assert await leases.acquire(SHARD, "c", 600.0) == 4  # handed on: no takeover, the last one still a's
            assert (takeovers(), (await leases.rows())[0].taken_from) == (1.0, "a")

    METER.enabled = True
    try:
        asyncio.run(main())
    finally:
        METER.reset()


def test_a_standby_asks_again_as_the_holders_lease_expires_not_a_whole_period_later(dsn: str) -> None:
    """The holder stopped renewing (it died): its lease runs out in under a renew period, so the standby's next try is
    aimed at that moment (as the database measured it), not at its next period; a lease renewed in time is asked
    for again a period later, as before."""
    clock = FakeClock()

    async def main() -> None:
        async with leases_on(dsn) as leases:
            keeper = LeaseKeeper(leases, SHARD, "standby", clock, renew=2.0, ttl=6.0)
            assert await leases.acquire(SHARD, "holder", 6.0) == 1
            stepping = asyncio.create_task(keeper.step())
            await until(lambda: state_of(keeper) is LeaseState.UNHELD and clock.sleepers == 1, 10,
                        "the standby told the shard is taken, and waiting")  # not the acquire's own bound
            assert clock.slept[-1] == 2.0  # a live lease with 6 s left: the next period
            clock.advance(2.0)
            await stepping
            await leases.release(Fence(SHARD, "holder", 1))
            assert await leases.acquire(SHARD, "holder", 1.0) == 2  # renewed for 1 s, then never again
            stepping = asyncio.create_task(keeper.step())
            await until(lambda: state_of(keeper) is LeaseState.UNHELD and clock.sleepers == 1, 10,
                        "the standby told the shard is taken, and waiting")  # not the acquire's own bound
            assert 0.0 < clock.slept[-1] <= 1.05  # at its expiry (plus the slack), not 2 s on
            clock.advance(clock.slept[-1])
            await stepping

            async def expired() -> bool:  # the database's clock, not the fake one, says when it has
                return all(r.expires_in < 0 for r in await leases.rows())

            await until_probe(expired, 10, "the holder's lease expired")
            await keeper.step()
            assert keeper.fence == Fence(SHARD, "standby", 3)

    asyncio.run(main())


def test_a_shard_served_for_another_tree_is_claimed_by_the_tree_that_prefers_it_and_handed_back_at_once(dsn: str) -> None:
    """Tree b took shard 0/2, which it does not prefer (``CLANKIE_DISCORD_SHARD_TAKEOVER=any``). Tree a, which prefers
    it, comes back and claims it; b's next renew hears the claim and b hands the shard back: released at once, not at
    its TTL. While the claim is live no third tree takes the released row, nor b again, nor b's service; a takes it at
    the next epoch, counted as a handback, and the claim is gone."""
    clock = FakeClock()
    actions: list[Action] = []
    claims: list[str] = []

    def handbacks() -> float:
        report = METER.report()
        assert report is not None
        return sum(s.value for s in report.counters.get("clankie_lease_takeovers_total", ()) if s.labels == ("handback",))

    async def main() -> None:
        async with leases_on(dsn) as leases:
            b = LeaseKeeper(leases, SHARD, "b", clock, renew=2.0, ttl=6.0, want=Want.TAKE, on_action=actions.append,
                            on_claimed=lambda: claims.append("b"))
            await b.step()
            assert fence_of(b) == Fence(SHARD, "b", 1)
            assert rows(dsn, "SELECT preferred, claimed_by FROM clankie_shard_lease") == [(False, None)]
            refused, left = await leases.try_acquire(SHARD, "c", 6.0, Want.TAKE)
            assert refused is None and 5.0 < left <= 6.0  # b's live lease: c asks again as it would expire
            assert rows(dsn, "SELECT claimed_by FROM clankie_shard_lease") == [(None,)]  # c does not prefer it
            assert (await leases.try_acquire(SHARD, "a", 6.0, Want.PREFER))[0] is None  # b's lease is live: a claims
            assert rows(dsn, "SELECT claimed_by FROM clankie_shard_lease") == [("a",)]

            clock.advance(2.0)
            await b.step()  # the renew: still b's, and claimed
            assert (fence_of(b), claims) == (Fence(SHARD, "b", 1), ["b"])
            await asyncio.gather(b.hand_back(), b.step())  # the owner hands it back; the keeper's next step releases
            assert (state_of(b), fence_of(b)) == (LeaseState.RELEASED, None)
            assert actions[-1] == Action(Kind.STOP_SERVING, 1, "released")

            assert await leases.try_acquire(SHARD, "c", 6.0, Want.TAKE) == (None, float("inf"))  # claimed: not c's
            assert await leases.try_acquire(SHARD, "b", 6.0, Want.JOIN) == (None, float("inf"))  # b's service
            again = asyncio.create_task(b.step())  # b still wants it as before (another's shard): the claim keeps it off
            await until(lambda: state_of(b) is LeaseState.UNHELD and clock.sleepers == 1, 10, "b refused, waiting")
            again.cancel()
            assert await leases.try_acquire(SHARD, "a", 6.0, Want.PREFER) == (2, 0.0)
            assert handbacks() == 1.0
            assert rows(dsn, "SELECT holder, epoch, preferred, claimed_by, taken_from FROM clankie_shard_lease") == [
                ("a", 2, True, None, None)]  # a handback is no takeover of an expired lease
            assert (await leases.try_acquire(SHARD, "b", 6.0, Want.TAKE))[0] is None  # a's now, and a prefers it
            assert (await leases.try_acquire(SHARD, "d", 6.0, Want.PREFER))[0] is None  # d prefers it too: no claim
            assert rows(dsn, "SELECT holder, claimed_by FROM clankie_shard_lease") == [("a", None)]

    METER.enabled = True
    try:
        asyncio.run(main())
    finally:
        METER.reset()
