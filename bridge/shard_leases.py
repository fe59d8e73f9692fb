"""The bridge's shard leases in the PostgreSQL profile: the gateway is open only while every shard it runs is ours.

In ``CLANKIE_STORE=postgres`` each shard a bridge runs (``(id, count)``; an unsharded bot is ``0/1``) is held by
one tree at a time through its fenced lease (:mod:`clankie.store.leases`, docs/multi-machine.md). This shell keeps a
:class:`~clankie.store.leases.LeaseKeeper` for each and tells the app two things:

* :meth:`ShardLeases.wait_held`: every lease is ours, so the gateway may open (a tree whose shard another tree holds
  waits here, without an IDENTIFY, until that lease is released or expires);
* :attr:`ShardLeases.lost`: one lease stopped being ours (its renew was refused, or its local deadline passed before
  the lease could expire on the database), so the gateway must close at once: another tree may be taking the shard.

The bridge does not release its leases when it stops: the tree's service keeps them (a bridge restarted alone
joins them at the same epoch and RESUMEs), and releases them when the tree stops. A lease taken at another epoch
than the one this bridge last served at (:data:`TENURES_FILE`) forgets the stored gateway session first.

A tree is named on its leases by :func:`clankie.store.leases.tree_holder`: its host and its state directory. Its
service keeps the same leases under the same name (for the writes of its lanes and its ledger); the tree's next
bridge (after a crash, a spare's take-over) is the same holder and takes a live lease back at once, epoch unchanged
(:meth:`clankie.store.leases.PgLeases.acquire`); another tree waits for the TTL. The gateway closes whole on a loss
(every shard this process runs), a coarser step than one shard's session; docs/multi-machine.md says so.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable
from pathlib import Path

from clankie.clock import Clock
from clankie.jsonl import replace_file
from clankie.metrics import METER, SHARD_LEASES
from clankie.store.lease import Action, Kind
from clankie.store.leases import Fence, LeaseKeeper, PgLeases, shard_name

log = logging.getLogger(__name__)

TENURES_FILE = "lease-epochs.json"
"""Under ``<state>/bridge``: the epoch this bridge last served each shard at. A lease taken at another epoch was
another tenure: another tree may have served the shard in between, so the stored gateway session is not RESUMEd
(Discord would replay what that tree answered); the bridge IDENTIFYs and reads the gap back, skipping what was
answered. A lease joined at the same epoch (the tree's service held it, or it had not expired) RESUMEs."""


class ShardLeases:
    """The leases of the shards one bridge runs; ``keys`` are ``(shard id, count)``."""

    def __init__(self, leases: PgLeases, keys: list[tuple[int, int]], holder: str, clock: Clock, *, renew: float,
                 ttl: float, tenures: Path | None = None,
                 on_new_tenure: Callable[[tuple[int, int]], None] | None = None,
                 on_taken: Callable[[tuple[int, int], bool], None] | None = None) -> None:
        """``on_new_tenure``: a shard's lease was taken at another epoch than this bridge (any of its processes) last
        served it at. ``on_taken``: this process serves a shard at an epoch it has not served it at (its first in
        this life included), told before the gateway may open, with whether the tenure is new as above (another tree
        may have served the shard since): the bridge drains the shard's journal then."""
        self.holder = holder
        self.tenures = tenures  # the epoch this bridge last served each shard at (a file of its state), or None
        self.on_new_tenure = on_new_tenure
        self.on_taken = on_taken
        self._served_at = _read_tenures(tenures)
        self._taken_at: dict[str, int] = {}  # the epoch this process last took each shard at
        self.keys = {shard_name(*key): key for key in keys}  # a lease's name -> the (id, count) it is for
        self.keepers = {
            name: LeaseKeeper(leases, name, holder, clock, renew=renew, ttl=ttl,
                              on_action=functools.partial(self.on_action, name))
            for name in self.keys
        }
        self.serving: set[str] = set()
        self._all_held = asyncio.Event()
        self.lost = asyncio.Event()  # set when a held lease stops being ours; cleared when all are held again

    def on_action(self, shard: str, action: Action) -> None:
        """A keeper's word (it must not block): a shard served, or no longer ours (the gateway must close)."""
        if action.kind is Kind.SERVE:
            anew = self._served_at.get(shard) != action.epoch
            if anew:  # taken anew: another tree may have served it since
                if self.on_new_tenure is not None:
                    self.on_new_tenure(self.keys[shard])
                self._served_at[shard] = action.epoch
                _write_tenures(self.tenures, self._served_at)
            if self._taken_at.get(shard) != action.epoch:
                self._taken_at[shard] = action.epoch
                if self.on_taken is not None:
                    self.on_taken(self.keys[shard], anew)
            self.serving.add(shard)
            if len(self.serving) == len(self.keepers):
                self.lost.clear()
                self._all_held.set()
        elif action.kind is Kind.STOP_SERVING:
            self.serving.discard(shard)
            self._all_held.clear()
            self.lost.set()
            log.error("shard %s: lease no longer ours (%s): the gateway closes", shard, action.reason or "lost")
        self._gauge()

    @property
    def held(self) -> bool:
        """Every lease is ours."""
        return self._all_held.is_set()

    def fence(self, shard: str) -> Fence | None:
        """The fence to write ``shard`` (by :func:`~clankie.store.leases.shard_name`) with while it is ours, else
        None (:data:`~clankie.store.leases.FenceFor`)."""
        keeper = self.keepers.get(shard)
        return keeper.fence if keeper is not None else None

    def current(self, now: float) -> bool:
        """Every lease is ours and inside its local deadline at ``now`` (the keepers' clock, ``boottime``): checked
        for each message before it is admitted. A tree paused past its deadline wakes with its gateway's buffered
        messages read before its keeper's timer runs; those may be another tree's to answer by now."""
        return self.held and all(now < k.lease.deadline for k in self.keepers.values())

    async def wait_held(self) -> None:
        """Until every lease is ours."""
        await self._all_held.wait()

    async def run(self) -> None:
        """Keep every lease until cancelled."""
        self._gauge()
        async with asyncio.TaskGroup() as tg:
            for shard, keeper in self.keepers.items():
                tg.create_task(keeper.run(), name=f"lease-{shard}")

    def detail(self) -> str:
        """``leases: 0/1 held (epoch 3)`` or ``leases: 0/2 held (epoch 1), 1/2 unheld``: for the status line."""
        return "leases: " + ", ".join(f"{s} held (epoch {k.lease.epoch})" if s in self.serving else f"{s} {k.lease.state.value}"
                                      for s, k in self.keepers.items())

    def report(self) -> dict[str, object]:
        """For the heartbeat: this tree's holder name, each shard's state and epoch."""
        return {"holder": self.holder,
                "shards": {s: {"state": "held" if s in self.serving else k.lease.state.value, "epoch": k.lease.epoch}
                           for s, k in self.keepers.items()}}

    def _gauge(self) -> None:
        if METER.enabled:
            METER.set(SHARD_LEASES.of("held"), float(len(self.serving)))
            METER.set(SHARD_LEASES.of("unheld"), float(len(self.keepers) - len(self.serving)))


MAX_TENURES_BYTES = 65536  # a few thousand shards' epochs; a bigger file is not ours to trust


def _read_tenures(path: Path | None) -> dict[str, int]:
    """The epochs this bridge last served at, by shard (empty: none kept, or unreadable: each shard taken anew)."""
    if path is None:
        return {}
    try:
        data = path.read_bytes()[:MAX_TENURES_BYTES + 1]
        raw = json.loads(data) if len(data) <= MAX_TENURES_BYTES else None
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return {str(k): v for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool)}


def _write_tenures(path: Path | None, epochs: dict[str, int]) -> None:
    if path is None:
        return
    try:
        replace_file(path, json.dumps(epochs, separators=(",", ":")).encode())
    except OSError as exc:  # the next start then takes each shard as new: an IDENTIFY, nothing worse
        log.warning("shard leases: the served epochs were not written (%s)", type(exc).__name__)
