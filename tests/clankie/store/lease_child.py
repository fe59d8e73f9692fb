"""A tree's lease holder in a process of its own, for the tests to pause (SIGSTOP) and wake.

``python -m tests.clankie.store.lease_child DSN SHARD HOLDER RENEW TTL`` keeps the shard's lease with a
:class:`~clankie.store.leases.LeaseKeeper` on the system clock and prints ``serve EPOCH`` / ``stop REASON`` as it moves.
Each stdin line ``write ID`` makes a fenced write of a dedupe row with the fence it was first granted (what a write
already under way when the process was paused carries), answered ``written ID`` or ``refused ID STALE_WRITES``.
``hold ID`` makes the write and keeps its transaction open (``holding ID``) until the next line, then commits:
``written ID``, or ``lost ID`` when the server ended the session meanwhile.
"""

from __future__ import annotations

import asyncio
import sys

import psycopg

from clankie.clock import SystemClock
from clankie.store.database import open_pool
from clankie.store.lease import Action, Kind
from clankie.store.leases import Fence, LeaseKeeper, PgLeases, StaleEpoch


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(dsn: str, shard: str, holder: str, renew: float, ttl: float) -> None:
    pool = await open_pool(dsn, ttl=ttl)
    leases = PgLeases(pool)
    first: list[Fence] = []

    def on_action(action: Action) -> None:
        if action.kind is Kind.SERVE:
            first.append(Fence(shard, holder, action.epoch))
            say(f"serve {action.epoch}")
        else:
            say(f"stop {action.reason}")

    keeper = LeaseKeeper(leases, shard, holder, SystemClock(), renew=renew, ttl=ttl, on_action=on_action)
    task = asyncio.create_task(keeper.run())
    reader = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode().split():
        command, message_id = line
        try:
            async with leases.fenced(first[0]) as conn:
                await conn.execute("INSERT INTO clankie_dedupe (message_id, shard, fingerprint, expires, written_epoch) "
                                   "VALUES (%s, %s, 0, 0, %s)", (message_id, shard, first[0].epoch))
                if command == "hold":
                    say(f"holding {message_id}")
                    await reader.readline()
        except StaleEpoch:
            say(f"refused {message_id} {leases.stale_writes}")
        except psycopg.Error as exc:  # the server ended the session: 25P03, idle in transaction too long
            say(f"lost {message_id} {exc.sqlstate or type(exc).__name__}")
        else:
            say(f"written {message_id}")
    task.cancel()
    await pool.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])))
