"""discord.py's rate-limit buckets are swept in amortised time, and idle ones still go (bridge/ratelimits.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from bridge.discord_gateway import BridgeClient  # imports discord.py with its import-time warnings handled
from bridge.ratelimits import FLOOR, amortise_bucket_sweep


def http_client() -> Any:
    from discord.http import HTTPClient  # after bridge.discord_gateway (see above)

    return HTTPClient(asyncio.get_running_loop())


def test_ten_thousand_rooms_cost_a_linear_number_of_bucket_looks_not_a_quadratic_one() -> None:
    """A new bucket per room, 10,000 rooms within discord.py's 300 s idle time: the sweeps look at fewer than
    three buckets per room in all, where discord.py's own walk looks at every bucket for every new one."""

    async def main() -> None:
        http = http_client()
        sweep = amortise_bucket_sweep(http)
        assert sweep is not None
        for room in range(10_000):
            http.get_ratelimit(f"POST /channels/{room}/messages")
        assert len(http._buckets) == 10_000  # none idle yet: all kept, as discord.py would
        assert sweep.inspected < 3 * 10_000
        own = sum(n for n in range(FLOOR, 10_000))  # discord.py: every bucket, at every new bucket past 256
        assert own > 1000 * sweep.inspected

    asyncio.run(main())


def test_idle_buckets_still_go_and_the_map_stays_bounded() -> None:
    """Buckets idle past discord.py's 300 s are removed at the next sweep, as before; busy ones stay."""

    async def main() -> None:
        http = http_client()
        sweep = amortise_bucket_sweep(http)
        assert sweep is not None
        for room in range(FLOOR - 1):
            http.get_ratelimit(f"POST /channels/{room}/messages")
        for bucket in http._buckets.values():
            bucket._last_request -= 301  # idle for longer than discord.py keeps a bucket
        assert sweep.sweeps == 0
        http.get_ratelimit("POST /channels/busy/messages")  # the 256th bucket: the sweep runs
        assert sweep.sweeps == 1 and list(http._buckets) == ["POST /channels/busy/messages"]
        assert sweep.swept == FLOOR - 1

    asyncio.run(main())


def test_the_bridge_clients_install_it() -> None:
    """Both gateway clients (single and sharded) carry the amortised sweep on their HTTP client."""

    async def main() -> None:
        client = BridgeClient(on_message_cb=lambda _m: None, on_status=lambda _s: None, on_owner=lambda _o: None,
                              discover_gateway=False)
        try:
            assert client.bucket_sweep is not None
            assert client.http._try_clear_expired_ratelimits is client.bucket_sweep  # an instance attribute shadows the method
        finally:
            await client.close()

    asyncio.run(main())


def test_an_unknown_client_shape_keeps_its_own_sweep() -> None:
    """A discord.py without these private names is left alone (and says so in the log)."""
    assert amortise_bucket_sweep(object()) is None
