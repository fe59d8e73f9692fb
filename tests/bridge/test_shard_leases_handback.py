"""The bridge's side of a handback (bridge/shard_leases.py, ``CLANKIE_DISCORD_SHARD_TAKEOVER=any``): a shard served for
another tree leaves the gateway's set the moment its claim is heard, is released only after ``quiesce`` (the gateway
off it, its deliveries ended, its writes landed), and the shards this tree prefers are never handed back. A fake
clock; the keepers driven through their own ``step`` by a double of the database's answers (the SQL's side of a claim
is tested on a real PostgreSQL in tests/clankie/store/test_leases.py, the whole on two real trees in
tests/integration/test_tree_handback_pg.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import cast

from bridge.shard_leases import ShardLeases
from clankie.store.lease import LeaseState, Want
from clankie.store.leases import Fence, PgLeases
from clankie.testing.clock import FakeClock

RENEW, TTL = 2.0, 6.0
HOLDER = "host:0123abcd"


@dataclass
class Database:
    """The answers a keeper gets: each shard's epoch to take (None: another tree's), whether a renew finds a claim,
    and the releases asked for."""

    epochs: dict[str, int | None] = field(default_factory=dict)
    claimed: set[str] = field(default_factory=set)
    released: list[Fence] = field(default_factory=list)
    wants: dict[str, Want] = field(default_factory=dict)

    async def try_acquire(self, shard: str, holder: str, ttl: float, want: Want) -> tuple[int | None, float]:
        self.wants[shard] = want
        return self.epochs.get(shard), ttl

    async def renew_claimed(self, fence: Fence, ttl: float) -> tuple[bool, bool]:
        return True, fence.shard in self.claimed

    async def release(self, fence: Fence) -> bool:
        self.released.append(fence)
        return True


def test_a_claimed_shard_leaves_the_gateway_at_once_and_is_released_only_after_quiesce() -> None:
    async def main() -> None:
        clock = FakeClock()
        db = Database({"0/2": 1, "1/2": 4})
        quiesced: list[tuple[int, int]] = []
        gate = asyncio.Event()

        async def quiesce(key: tuple[int, int]) -> None:
            quiesced.append(key)
            await gate.wait()  # the gateway closing, the shard's deliveries ending

        leases = ShardLeases(cast(PgLeases, db), [(0, 2)], HOLDER, clock, renew=RENEW, ttl=TTL,
                             others=[(1, 2)], quiesce=quiesce)
        zero, one = leases.keepers["0/2"], leases.keepers["1/2"]
        assert db.wants == {} and (zero.want, one.want) == (Want.PREFER, Want.TAKE)
        await zero.step()
        await one.step()
        assert leases.gateway_keys() == [(0, 2), (1, 2)]  # its own shard and the one it serves for another tree
        assert "1/2 held for another tree (epoch 4)" in leases.detail()

        db.claimed = {"0/2", "1/2"}  # a claim on its own shard means nothing: it prefers it
        clock.advance(RENEW)
        await zero.step()
        await one.step()
        await asyncio.sleep(0)
        assert leases.handing == {"1/2"} and leases.changed.is_set()
        assert leases.gateway_keys() == [(0, 2)]  # out of the gateway before anything else
        assert quiesced == [(1, 2)] and db.released == []  # not released while its deliveries may still run
        assert leases.fence_for("1/2") == Fence("1/2", HOLDER, 4)  # its journal lines still carry the lease
        assert "1/2 handing back (epoch 4)" in leases.detail()

        gate.set()
        while not db.released:  # the keeper's run: its next step releases, asked at once (the clock never moves)
            await one.step()
        assert db.released == [Fence("1/2", HOLDER, 4)] and one.lease.state is LeaseState.RELEASED
        while leases.handing:
            await asyncio.sleep(0)
        assert leases.gateway_keys() == [(0, 2)] and leases.fence_for("1/2") is None
        assert zero.fence == Fence("0/2", HOLDER, 1)  # the preferred shard untouched

    asyncio.run(main())
