"""The bridge's shard leases in the PostgreSQL profile: the gateway runs only shards whose leases are ours.

In ``CLANKIE_STORE=postgres`` each shard a bridge runs (``(id, count)``; an unsharded bot is ``0/1``) is held by
one tree at a time through its fenced lease (:mod:`clankie.store.leases`, docs/multi-machine.md). This shell keeps a
:class:`~clankie.store.leases.LeaseKeeper` for each shard it prefers and, with ``CLANKIE_DISCORD_SHARD_TAKEOVER=any``,
for every other shard of the count, and tells the app which shards the gateway is to run
(:meth:`ShardLeases.gateway_keys`, :meth:`ShardLeases.next_gateway`; :attr:`ShardLeases.changed` when that may have
moved):

* the gateway runs every shard whose lease is ours (a tree whose shards other trees hold runs none and waits, without
  an IDENTIFY, until a lease is released or expires). A lease that stops being ours (its renew refused, or its local
  deadline passed before the lease could expire on the database) takes its shard out at once: another tree may be
  taking it; the gateway opens again on the rest, which RESUME.
* with ``any`` a shard of another tree's is taken only when its lease is free or expired and nobody claims it. When
  the tree that prefers it comes back, it claims the shard; at this tree's next renew :meth:`_claimed` hands it
  back: the gateway stops running it, its open deliveries end (bounded), the bridge's writes land, then the lease is
  released for the claimant (``quiesce``; docs/multi-machine.md, "Takeover and handback").

The bridge does not release its leases when it stops: the tree's service keeps them (a bridge restarted alone
joins them at the same epoch and RESUMEs), and releases them when the tree stops. A lease taken at another epoch
than the one this bridge last served at does not forget the shard's gateway session: that session is kept in the
database, not in this machine's file, and whoever takes the shard RESUMEs it from the sequence its last holder
journaled (:meth:`bridge.gateway_session.SessionKeeper.adopt`; docs/multi-machine.md, "Takeover"). :meth:`fence_for`
is the fence the bridge's own writes carry (:mod:`bridge.store_writer`, the journal's store). Whether a tenure is
new to this bridge (:data:`TENURES_FILE`) still matters to its journal: a shard another tree may have served since
holds its admitted messages back until the new session has read each room's history (``on_taken``).

A tree is named on its leases by :func:`clankie.store.leases.tree_holder`: its host and its state directory. Its
service keeps the same leases under the same name (for the writes of its lanes and its ledger); the tree's next
bridge (after a crash, a spare's take-over) is the same holder and takes a live lease back at once, epoch unchanged
(:meth:`clankie.store.leases.PgLeases.acquire`); another tree waits for the TTL.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from clankie.clock import Clock
from clankie.jsonl import replace_file
from clankie.metrics import METER, SHARD_LEASES
from clankie.store.lease import Action, Kind, Want
from clankie.store.leases import TRANSIENT, Fence, LeaseKeeper, LeaseRow, PgLeases, shard_name

log = logging.getLogger(__name__)

TENURES_FILE = "lease-epochs.json"
"""Under ``<state>/bridge``: the epoch this bridge last served each shard at. A lease taken at another epoch was
another tenure: another tree may have served the shard in between and answered a message this bridge's journal
holds open, so those wait for the new session's history check (:func:`bridge.recovery.resume_taken`). The gateway
session is not forgotten for it: it is the shard's, kept in the database."""


class ShardLeases:
    """The leases of the shards one bridge runs; ``keys`` are ``(shard id, count)``."""

    def __init__(self, leases: PgLeases, keys: list[tuple[int, int]], holder: str, clock: Clock, *, renew: float,
                 ttl: float, tenures: Path | None = None,
                 on_taken: Callable[[tuple[int, int], bool], None] | None = None,
                 others: list[tuple[int, int]] | None = None,
                 quiesce: Callable[[tuple[int, int]], Awaitable[None]] | None = None) -> None:
        """``keys``: the shards this tree prefers. ``others`` (``CLANKIE_DISCORD_SHARD_TAKEOVER=any``): the other shards
        of the count, taken when free or expired and not claimed, and handed back when the tree that prefers one
        claims it: first ``quiesce`` (the gateway stops serving the shard, its open deliveries end or the handback's
        bound passes, the bridge's writes for it land), then the release.

        ``on_taken``: this process serves a shard at an epoch it has not served it at (its first in this life
        included), told before the gateway may open, with whether the tenure is new to this bridge (any of its
        processes, :data:`TENURES_FILE`: another tree may have served the shard since): the bridge drains the
        shard's journal then."""
        self.holder = holder
        self.clock = clock
        self.tenures = tenures  # the epoch this bridge last served each shard at (a file of its state), or None
        self.on_taken = on_taken
        self._served_at = _read_tenures(tenures)
        self._taken_at: dict[str, int] = {}  # the epoch this process last took each shard at
        self.keys = {shard_name(*key): key for key in [*keys, *(others or [])]}  # a lease's name -> its (id, count)
        self.preferred = frozenset(shard_name(*key) for key in keys)
        self.keepers = {
            name: LeaseKeeper(leases, name, holder, clock, renew=renew, ttl=ttl,
                              on_action=functools.partial(self.on_action, name),
                              want=Want.PREFER if name in self.preferred else Want.TAKE,
                              on_claimed=None if name in self.preferred else functools.partial(self._claimed, name))
            for name in self.keys
        }
        self.quiesce = quiesce
        self.serving: set[str] = set()
        self.handing: set[str] = set()  # served for another tree that claimed them: being handed back
        self.changed = asyncio.Event()  # the set of shards the gateway is to run (:meth:`gateway_keys`) may have moved
        self._settled = asyncio.Event()  # every keeper has tried its shard once
        self._handbacks: set[asyncio.Task[None]] = set()
        self.leases = leases
        self.takeover: tuple[LeaseRow, float] | None = None  # the last takeover of one of ours, read at (monotonic)
        self._look = asyncio.Event()  # a shard was taken anew: read who had it before

    def on_action(self, shard: str, action: Action) -> None:
        """A keeper's word (it must not block): a shard served, or no longer ours (the gateway must close)."""
        if action.kind is Kind.SERVE:
            anew = self._served_at.get(shard) != action.epoch
            if anew:  # taken anew: another tree may have served it since
                self._served_at[shard] = action.epoch
                _write_tenures(self.tenures, self._served_at)
            if self._taken_at.get(shard) != action.epoch:
                self._taken_at[shard] = action.epoch
                self._look.set()  # read whose the shard was before
                if self.on_taken is not None:
                    self.on_taken(self.keys[shard], anew)
            self.serving.add(shard)
        elif action.kind is Kind.STOP_SERVING:
            self.serving.discard(shard)
            if action.reason == "released" and shard in self.handing:
                log.info("shard %s: handed back to the tree that prefers it", shard)
            else:
                log.error("shard %s: lease no longer ours (%s): the gateway closes", shard, action.reason or "lost")
        self.changed.set()
        self._gauge()

    @property
    def held(self) -> bool:
        """Every preferred lease is ours."""
        return self.preferred <= self.serving

    def gateway_keys(self) -> list[tuple[int, int]]:
        """The shards the gateway is to run now, by id: every shard whose lease is ours, but one being handed back.
        A shard whose lease another tree holds is simply not run (a standby runs none); a lease lost takes its shard
        out and the gateway opens again on the rest, each of which RESUMEs."""
        return sorted(self.keys[s] for s in self.serving - self.handing)

    async def next_gateway(self) -> list[tuple[int, int]]:
        """Once every keeper has tried its shard, the gateway's next set (:meth:`gateway_keys`) as soon as it has one;
        :attr:`changed` is cleared, so it is set again by the next move."""
        await self._settled.wait()
        while True:
            self.changed.clear()
            keys = self.gateway_keys()
            if keys:
                return keys
            await self.changed.wait()

    def current(self, now: float, shards: list[tuple[int, int]] | None = None) -> bool:
        """Every lease of ``shards`` (None: every preferred one) is ours and inside its local deadline at ``now`` (the
        keepers' clock, ``boottime``): checked for each message before it is admitted. A tree paused past its
        deadline wakes with its gateway's buffered messages read before its keeper's timer runs; those may be
        another tree's to answer by now."""
        names = self.preferred if shards is None else {shard_name(*key) for key in shards}
        return names <= self.serving and all(now < self.keepers[n].lease.deadline for n in names)

    def _claimed(self, shard: str) -> None:
        """A renew found ``shard`` (served for another tree) claimed by the tree that prefers it: hand it back."""
        if shard in self.handing:
            return
        self.handing.add(shard)
        self.changed.set()
        log.info("shard %s: claimed by the tree that prefers it; handing it back", shard)
        task = asyncio.get_running_loop().create_task(self._hand_back(shard), name=f"handback-{shard}")
        self._handbacks.add(task)
        task.add_done_callback(self._handbacks.discard)

    async def _hand_back(self, shard: str) -> None:
        try:
            if self.quiesce is not None:
                await self.quiesce(self.keys[shard])
            await self.keepers[shard].hand_back()
        finally:
            self.handing.discard(shard)
            self.changed.set()

    def fence_for(self, shard: str) -> Fence | None:
        """The fence a write for ``shard`` (by :func:`~clankie.store.leases.shard_name`) carries now: while its lease
        is ours and inside its local deadline (as :meth:`current`), else None (the write is refused unsent): the
        fence of the bridge's session and dedupe changes and of its journal's lines."""
        keeper = self.keepers.get(shard)
        if keeper is None or shard not in self.serving or self.clock.boottime() >= keeper.lease.deadline:
            return None
        return keeper.fence

    async def run(self) -> None:
        """Keep every lease until cancelled: each tried once (all at once), then each kept."""
        self._gauge()
        try:
            await asyncio.gather(*(keeper.step() for keeper in self.keepers.values()))
        finally:
            self._settled.set()
        async with asyncio.TaskGroup() as tg:
            for shard, keeper in self.keepers.items():
                tg.create_task(keeper.run(), name=f"lease-{shard}")
            tg.create_task(self._takeovers(), name="lease-takeovers")

    async def _takeovers(self) -> None:
        """After each new tenure, read the rows once for the newest takeover of one of this bridge's shards."""
        while True:
            await self._look.wait()
            self._look.clear()
            try:
                rows = await self.leases.rows()
            except TRANSIENT as exc:  # the status line goes without it; the next tenure reads again
                log.info("shard leases: the takeovers were not read (%s)", type(exc).__name__)
                continue
            taken = [r for r in rows if r.shard in self.keepers and r.taken_ago is not None]
            if taken:
                self.takeover = (min(taken, key=lambda r: r.taken_ago or 0.0), self.clock.monotonic())

    def detail(self) -> str:
        """``leases: 0/1 held (epoch 3)`` or ``leases: 0/2 held (epoch 1), 1/2 unheld``, then the last takeover of one
        of them (``last takeover: 0/1 from host:1a2b3c4d, 42s ago``): for the status line."""
        line = "leases: " + ", ".join(self._describe(s, k) for s, k in self.keepers.items()
                                      if s in self.preferred or s in self.serving)
        if self.takeover is not None:
            row, ago = self.takeover[0], self._takeover_ago()
            line += f"; last takeover: {row.shard} from {row.taken_from}, {ago:.0f}s ago"
        return line

    def _describe(self, shard: str, keeper: LeaseKeeper) -> str:
        """One lease for the status line: ``0/2 held (epoch 3)``, ``1/2 held for another tree (epoch 2)``, ``1/2
        handing back (epoch 2)``, or ``0/2 unheld``."""
        state = self._state(shard, keeper)
        return f"{shard} {state} (epoch {keeper.lease.epoch})" if shard in self.serving else f"{shard} {state}"

    def _takeover_ago(self) -> float:
        """Seconds since the last takeover: its age on the database's clock when read, and the time since."""
        assert self.takeover is not None
        row, read_at = self.takeover
        return (row.taken_ago or 0.0) + self.clock.monotonic() - read_at

    def report(self) -> dict[str, object]:
        """For the heartbeat: this tree's holder name, each shard's state and epoch."""
        report: dict[str, object] = {
            "holder": self.holder,
            "shards": {s: {"state": self._state(s, k), "epoch": k.lease.epoch}
                       for s, k in self.keepers.items() if s in self.preferred or s in self.serving}}
        if self.takeover is not None:
            row = self.takeover[0]
            report["takeover"] = {"shard": row.shard, "from": row.taken_from, "ago_s": round(self._takeover_ago(), 1)}
        return report

    def _state(self, shard: str, keeper: LeaseKeeper) -> str:
        """A lease's state for the heartbeat and the status line."""
        if shard not in self.serving:
            return keeper.lease.state.value
        return "handing back" if shard in self.handing else "held" if shard in self.preferred else "held for another tree"

    def _gauge(self) -> None:
        if METER.enabled:  # unheld: the preferred ones only (a shard this tree may take for another is not missing)
            METER.set(SHARD_LEASES.of("held"), float(len(self.serving)))
            METER.set(SHARD_LEASES.of("unheld"), float(len(self.preferred - self.serving)))


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
    except OSError as exc:  # the next start then takes each shard as new: its held-back messages wait for history
        log.warning("shard leases: the served epochs were not written (%s)", type(exc).__name__)
