"""``ShardLeases.fence_for`` (bridge/shard_leases.py), the fence the bridge's own writes carry (its store writer's
session and dedupe changes, its journal's lines): the keeper's fence while the shard is served and inside its local
deadline, else None, so a write is refused before the database. A fake clock; the keepers driven through their own
``step`` by a double of the database's answers (the unit here is the bridge's view, not the SQL: the adapter's
answers are tested on a real PostgreSQL in tests/clankie/store/test_leases.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import cast

from bridge.shard_leases import ShardLeases
from clankie.store.lease import LEASE_MARGIN, Want
from clankie.store.leases import Fence, PgLeases
from clankie.testing.clock import FakeClock

RENEW, TTL = 2.0, 6.0
HOLDER = "host:0123abcd"


@dataclass
class Answers:
    """What the database says to each keeper's acquire (an epoch, or None: another tree holds it) and renew."""

    epochs: dict[str, int | None] = field(default_factory=dict)
    renews: bool = True

    async def try_acquire(self, shard: str, holder: str, ttl: float, want: Want) -> tuple[int | None, float]:
        return self.epochs.get(shard), ttl

    async def renew_claimed(self, fence: Fence, ttl: float) -> tuple[bool, bool]:
        return self.renews, False


def test_the_fence_is_the_keepers_while_the_shard_is_served_inside_its_local_deadline_and_none_otherwise() -> None:
    async def main() -> None:
        clock = FakeClock()
        answers = Answers({"0/2": 3, "1/2": None})
        leases = ShardLeases(cast(PgLeases, answers), [(0, 2), (1, 2)], HOLDER, clock, renew=RENEW, ttl=TTL)
        zero, one = leases.keepers["0/2"], leases.keepers["1/2"]

        assert leases.fence_for("0/2") is None  # not asked yet: not served
        await zero.step()  # granted at epoch 3, at boottime 1000
        asking = asyncio.create_task(one.step())  # another tree holds shard 1: its keeper waits to ask again
        await asyncio.sleep(0)
        assert leases.fence_for("0/2") == Fence("0/2", HOLDER, 3) == zero.fence
        assert leases.fence_for("1/2") is None  # held by another tree: not served
        assert leases.fence_for("2/2") is None and leases.fence_for("0/1") is None  # not a shard this bridge runs

        deadline = 1000.0 + TTL - LEASE_MARGIN
        assert zero.lease.deadline == deadline
        clock.advance(deadline - 1000.0 - 0.001)
        assert leases.fence_for("0/2") == Fence("0/2", HOLDER, 3)
        clock.advance(0.001)  # at the local deadline, before the keeper has noticed (a pause: its timer not run yet)
        assert zero.fence is not None and "0/2" in leases.serving  # the keeper still thinks it serves
        assert leases.fence_for("0/2") is None  # but no write may carry its fence any more

        answers.epochs["0/2"] = 5
        await zero.step()  # the keeper notices: stop serving
        assert leases.fence_for("0/2") is None and "0/2" not in leases.serving
        await zero.step()  # taken again, by the next tenure
        assert leases.fence_for("0/2") == Fence("0/2", HOLDER, 5)

        clock.advance(RENEW)
        answers.renews = False  # the renew is refused: another tree took the shard
        await zero.step()
        assert leases.fence_for("0/2") is None
        assert leases.fence_for("1/2") is None
        asking.cancel()

    asyncio.run(main())
