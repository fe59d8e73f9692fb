"""The bridge process's body: settings wired to the core, the service link and discord.py, run in one task group.

``python -m bridge`` runs it. :class:`BridgeApp` wires settings to the core (:mod:`bridge.turns`), the
service link and the discord.py client, and keeps an honest status for the
supervisor's heartbeat: ``connecting``, ``connected``, ``disabled (no token)``
or ``failed: <reason>``. Without a token the bridge stays up and healthy in
local-only mode. A rejected token or an ungranted message-content intent is
the operator's to fix: :class:`clankie.errors.ConfigError`, exit status 78.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bridge import discord_client as dc
from bridge import recovery
from bridge.admission import Ingress, Policy
from bridge.delivery import RetryPolicy
from bridge.gateway_session import SessionKeeper
from bridge.journal import Journal
from bridge.journal_state import Entry
from bridge.receipts import Receipts, audit_rotation
from bridge.shards import ReadBack, ShardWatch
from bridge.turns import Bridge
from clankie import paths
from clankie.appender import DiskError
from clankie.backoff import Backoff
from clankie.clock import Clock, SystemClock
from clankie.errors import ConfigError
from clankie.metrics import DISCORD_CONNECTED, DISCORD_SHARD_COUNT, DISCORD_SHARD_UP, JOURNAL_WAITING, METER
from clankie.protocol import Heartbeat, Room
from clankie.redact import Redactor
from clankie.settings import Settings
from clankie.shards import describe as describe_shards
from clankie.shards import others as other_shards
from clankie.shards import preferred as preferred_shards
from clankie.shards import room_shard
from clankie.store.journal_ports import JournalRefused, JournalStore
from clankie.waits import within

if TYPE_CHECKING:  # the postgres profile's driver is imported only in that profile
    from bridge.shard_leases import ShardLeases
    from bridge.store_writer import StoreWriter
    from clankie.store.database import Pool, SyncPool

log = logging.getLogger(__name__)

GUILD_READY_TIMEOUT = 0.1
"""discord.py waits this long after the last GUILD_CREATE before ``on_ready`` (which says "connected").
Its 2 s default had the status say "connecting" for 2 s while replies already flowed; Discord sends a
small bot's GUILD_CREATEs right after READY, and messages are handled from READY on regardless."""
HANDBACK_TICK = 0.05  # seconds between looks while a shard is handed back (its gateway closing, its deliveries ending)

TOKEN_REJECTED = "Discord rejected the bot token (401/4004); check DISCORD_TOKEN or the discord_token credential"
INTENT_MISSING = (
    "Discord closed the gateway with 4014: the Message Content intent is not enabled for this bot "
    "in the Developer Portal (Bot → Privileged Gateway Intents)"
)


def policy(settings: Settings) -> Policy:
    return Policy(
        guild_ids=frozenset(settings.discord_guild_ids),
        channel_ids=frozenset(settings.discord_channel_ids),
        dm_policy=settings.discord_dm_policy,
        owner_id=settings.discord_owner_id,
        dm_user_ids=frozenset(settings.discord_dm_user_ids),
        reply_policy=settings.discord_reply_policy,
        window=settings.discord_engagement_declines,
        names=(settings.character_id,),
        retention_s=settings.bridge_retention_seconds,
        horizon_s=settings.recovery_horizon_seconds,
        max_retained=settings.discord_max_retained,
        max_turns=settings.discord_max_turns,
        user_turns_per_minute=settings.user_turns_per_minute,
        room_turns_per_minute=settings.room_turns_per_minute,
        steer_share=settings.user_steer_share,
        paced_minutes=settings.user_paced_minutes,
        engagement_idle_s=settings.discord_engagement_idle_seconds,
        engagement_max_rooms=settings.discord_engagement_max_rooms,
    )


def limits(settings: Settings) -> recovery.Limits:
    return recovery.Limits(
        horizon=settings.recovery_horizon_seconds,
        retention=settings.bridge_retention_seconds,
        max_rooms=settings.recovery_max_rooms,
        max_pages=settings.recovery_max_pages,
        max_messages=settings.recovery_max_messages,
    )


class BridgeApp:
    """One bridge process's worth of state; ``await app.run()`` until cancelled or misconfigured."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock | None = None,
        retry: RetryPolicy | None = None,
        guild_ready_timeout: float = GUILD_READY_TIMEOUT,
        warm: dc.BridgeClient | dc.ShardedBridgeClient | None = None,
    ) -> None:
        self.settings = settings
        self._warm = warm  # a parked spare's client, logged in while the last bridge lived: the first session's
        self.clock = clock or SystemClock()
        self.discord_status = "disabled (no token)" if settings.discord_token is None else "connecting"
        self._guild_ready_timeout = guild_ready_timeout
        self._heartbeat_seq = 0
        self.shards = describe_shards(settings.discord_shard_ids, settings.discord_shard_count)  # "" unless sharded
        self.ready = asyncio.Event()
        paths.ensure_private_dir(settings.runtime_dir)
        self.receipts = Receipts(settings.state_dir, wall=self.clock.wall, rotation=audit_rotation(settings))
        self.ingress = Ingress(policy(settings))
        # the gateway sessions, one per shard this process runs, kept across processes (bridge.gateway_session)
        count = settings.discord_shard_count
        self.preferred_keys = preferred_shards(settings.discord_shard_ids, count)
        # with CLANKIE_DISCORD_SHARD_TAKEOVER=any (postgres), every other shard of the count: served for another tree
        self.other_keys = other_shards(settings.discord_shard_ids, count, settings.discord_shard_takeover)
        self.shard_keys = self.preferred_keys + self.other_keys  # every shard this process may run
        self.gateway_keys: list[tuple[int, int]] = []  # the shards the gateway runs now (the postgres profile)
        self._journal_pool: SyncPool | None = None  # the postgres profile's journal, in the database by shard
        self._taken_open: list[Entry] = []  # admitted deliveries of shards taken from another tree, to check first
        self._draining: set[asyncio.Task[None]] = set()  # a taken shard's drain tried again (the database was away)
        # closed deliveries stay in the journal for the catch-up horizon; their ids, for the whole retention, in the
        # de-duplication memory, which the journal saves at each compaction
        self.journal = Journal(settings.state_dir, retention=settings.recovery_horizon_seconds,
                               max_bytes=settings.discord_journal_max_bytes, remembered=self.ingress.dedupe,
                               store=self._journal_store(), shard_count=count)
        self.limits = limits(settings)
        self.port = dc.DiscordPort(
            settings.discord_upload_limit_bytes,
            system_actors=frozenset(settings.discord_system_actor_ids),
            trusted_rooms=frozenset(settings.discord_trusted_rooms),
            redact=Redactor.of(settings),
        )
        self.keeper: SessionKeeper | None = None
        if settings.discord_token is not None:
            self.keeper = SessionKeeper(settings.state_dir, self.clock, enabled=settings.discord_gateway_resume,
                                        shards=len(self.shard_keys))
        self.recovered = recovery.Report()
        self._recovering: asyncio.Task[recovery.Report] | None = None
        self._read_back: ReadBack = frozenset()  # the rooms new sessions owe a read-back, not yet read (None: all)
        self.leases: ShardLeases | None = None  # the postgres profile's shard leases, made in run()
        self._unleased_gap = False  # a message came past the lease's deadline since the gateway last opened
        self._pool: Pool | None = None
        self.store: StoreWriter | None = None  # the postgres profile: the session and dedupe changes, to the database
        self._again = False
        # no gateway session yet: messages since start (or since a gap the last bridge never read back) may be missing
        started = self.clock.wall()
        earlier = self.journal.state.quiet_since()
        self._quiet_since: float | None = min(started, earlier) if earlier is not None else started
        # a gap that began before a stored session did is one its RESUME cannot replay: read it back then too
        stored = [self.keeper.stored(k) for k in self.shard_keys] if self.keeper is not None else []
        since = [s.since for s in stored if s is not None]
        self._gap_before_session = earlier is not None and bool(since) and earlier < max(since)
        self.bridge = Bridge(
            ingress=self.ingress,
            port=self.port,
            redact=self.port.redact,
            receipts=self.receipts,
            journal=self.journal,
            clock=self.clock,
            service_path=paths.socket_path(settings.runtime_dir, "service"),
            attachment_root=settings.attachment_root,
            upload_limit=settings.discord_upload_limit_bytes,
            retry=retry,
            failure_reaction=settings.discord_failure_reaction,
            tool_card=settings.discord_tool_card,
        )

    # ------------------------------------------------------------ status

    def set_status(self, status: str) -> None:
        if status != self.discord_status:
            log.info("discord: %s", status)
        self.discord_status = status

    def _shard_gauges(self) -> None:
        """Under sharding: the bot's shard count, and each of this tree's shards up or not (its client's watch)."""
        count = self.settings.discord_shard_count
        if count is None:
            return
        METER.set(DISCORD_SHARD_COUNT.of(), float(count))
        watch = getattr(self.port.client, "watch", None)  # the sharded client's, once it exists
        if isinstance(watch, ShardWatch):
            for shard in watch.ids:
                METER.set(DISCORD_SHARD_UP.of(str(shard)), 0.0 if shard in watch.down else 1.0)

    def heartbeat(self) -> Heartbeat:
        """The heartbeat record for the supervisor: status in ``detail``, counters in ``report``."""
        self._heartbeat_seq += 1
        c = self.bridge.turns.counts()
        report: dict[str, Any] = {
            "discord": self.discord_status,
            "service": self.bridge.link.status,
            "held": len(self.bridge.turns),
            "turns": self.bridge.turns_in_flight,
            "retained": self.ingress.retained,
            "dedupe_evicted": self.ingress.dedupe.evicted,
            "dedupe_forgot_early": self.ingress.dedupe.forgot_early,
            "pending_triggers": self.bridge.pending_triggers,
            "waiting": len(self.bridge.waiting),
            "waiting_rooms": self.bridge.waiting.rooms,
            "paced": self.bridge.paced,
            "paced_people": self.ingress.paced.people,
            "journal_bytes": self.journal.size,
            "tool_cards": self.bridge.cards.live,
            "admitted": c.admitted,
            "dropped": c.dropped,
            "buffered": c.buffered,
            "duplicates": c.duplicates,
            "replies": c.replies,
            "reply_failures": c.reply_failures,
            "outcomes": dict(c.by_outcome),
            "resubmits": self.bridge.link.resubmits,
            "recovered": c.recovered,
            "expired": c.expired,
            "journal_open": sum(1 for e in self.journal.state.entries.values() if e.open),
            "missed_fetched": self.recovered.fetched,
            "engaged_rooms": self.ingress.engaged_rooms,
            "engagement_evicted": self.ingress.engagement_evicted,
        }
        disk = self.journal.last_error or self.receipts.last_error
        if disk is not None:
            report["disk"] = disk
        detail = f"discord: {self.discord_status}; service: {self.bridge.link.status}"
        if self.keeper is not None:
            self.keeper.tick()
            report["gateway"] = self.keeper.report()
            detail += f"; {self.keeper.detail()}"
        if self.store is not None:  # what the write-behind did with the session and dedupe changes
            report["store"] = {"written": self.store.written, "refused": self.store.refused,
                               "dropped": self.store.dropped, "pending": len(self.store.pending)}
            if self.store.dropped:  # changes the database failed: an operator's concern, not a fenced refusal;
                # before the leases' part, whose takeover (a host's name) can run the line past its 200 characters
                detail += f"; store: {self.store.dropped} changes dropped"
        if self.leases is not None:
            report["leases"] = self.leases.report()
            detail += f"; {self.leases.detail()}"
        if self.shards:  # after the gateway's part: the status line of a sharded tree ends with its shards
            report["shards"] = self.shards
            detail += f"; shards: {self.shards}"
        if self.bridge.waiting:
            held, cap = self.bridge.turns_in_flight, self.ingress.policy.max_turns
            detail += f"; waiting: {len(self.bridge.waiting)} in {self.bridge.waiting.rooms} rooms, turns {held}/{cap}"
            if self.bridge.disk.reason is not None:  # a full disk holds them in the journal (bridge.disk)
                detail += f", held ({self.bridge.disk.reason})"
                report["waiting_held"] = self.bridge.disk.reason
        if self.bridge.paced:
            people = self.ingress.paced.people
            detail += f"; paced: {self.bridge.paced} of {people} {'person' if people == 1 else 'people'}"
        if self.journal.full:
            detail += "; journal full"
        if disk is not None:
            detail += f"; disk: {disk}"
        if METER.enabled:
            METER.set(JOURNAL_WAITING.of(), float(len(self.bridge.waiting)))
            if self.settings.discord_token is not None:  # local-only has no session to lose
                METER.set(DISCORD_CONNECTED.of(), 1.0 if self.discord_status == "connected" else 0.0)
                self._shard_gauges()
        return Heartbeat(seq=self._heartbeat_seq, detail=detail[:200], report=report)

    # ------------------------------------------------------------ running

    async def run(self) -> None:
        refused: BaseException | None = None
        try:
            async with asyncio.TaskGroup() as tg:
                recovery.resume_journal(self.bridge, self.limits, self.clock.wall())
                if self._quiet_since is not None:
                    self.journal.gap(self._quiet_since)
                try:
                    await self.journal.compact(self.clock.wall())
                except DiskError as exc:  # a full disk is a state: the journal keeps every line, the bridge runs
                    log.error("journal: compaction at start not written (%s)", exc.code)
                tg.create_task(self.bridge.link.run(), name="service-link")
                if self.settings.discord_reply_policy == "addressed":
                    tg.create_task(self.bridge.catch_up_loop(self.settings.discord_catch_up_seconds), name="catch-up")
                if self.settings.store == "postgres" and self.settings.discord_token is not None:
                    self.leases = await self._hold_leases()
                    tg.create_task(self.leases.run(), name="shard-leases")
                    if self.store is not None:
                        tg.create_task(self.store.run(), name="store-writer")
                if self.settings.discord_token is not None:
                    tg.create_task(self._discord(), name="discord")
                else:
                    log.warning("no Discord token: running local-only")
                if self.keeper is not None:
                    tg.create_task(self.keeper.write_behind(), name="gateway-session-writer")
                self.ready.set()
        except* ConfigError as group:  # raised alone below: Python before 3.11.4 (Debian 12's 3.11.2) groups a raise here
            refused = group.exceptions[0]
        finally:
            if self._warm is not None:  # a parked spare's client this life stopped before its gateway could take
                warm, self._warm = self._warm, None
                await warm.close()
            if self.store is not None:  # what the last moments changed (a planned stop: the lease is still the tree's)
                await self.store.stop(self.keeper, self.settings.lease_ttl_seconds)
            if self._pool is not None:
                await self._pool.close()
            await self.bridge.aclose()
            if self._recovering is not None:
                self._recovering.cancel()
            for task in self._draining:
                task.cancel()
            if self.keeper is not None:
                self.keeper.flush()
            self.journal.aclose()
            if self._journal_pool is not None:
                self._journal_pool.close()
            self.receipts.close()
        if refused is not None:
            raise refused from None

    def _on_quiet(self) -> None:
        """The gateway session dropped: from now on, messages may be missed until a resume or a recovery."""
        if self._quiet_since is None:
            self._quiet_since = self.clock.wall()
            self.journal.gap(self._quiet_since)

    def _on_quiet_at(self, since: float) -> None:
        self._quiet_since = since if self._quiet_since is None else min(since, self._quiet_since)

    def _on_resumed(self) -> None:
        """Discord replays what it sent during the gap: nothing to fetch (unless the gap is older than the session).
        A shard taken from another tree RESUMEs that tree's session: the deliveries it left admitted and open (held
        back by the drain) still want their history check, which only a recovery does."""
        if self._taken_open:
            self._on_session(frozenset())  # the held-back deliveries' rooms only (no other room is read for it)
        if self._gap_before_session:
            self._gap_before_session = False
            self._on_session()
            return
        if self._quiet_since is not None and (self._recovering is None or self._recovering.done()):
            self._quiet_since = None
            self.journal.caught_up(self.clock.wall())

    def _on_session(self, shards: ReadBack = None) -> None:
        """A new gateway session: fetch what Discord will not replay (one recovery at a time), in the rooms of
        ``shards`` (the shards that started anew; the ones that resumed were replayed) or every room (None)."""
        self._read_back = None if shards is None or self._read_back is None else self._read_back | shards
        if self._recovering is not None and not self._recovering.done():
            self._again = True
            return
        self._recovering = asyncio.get_running_loop().create_task(self._fetch_missed(), name="recovery")

    async def _fetch_missed(self) -> recovery.Report:
        while True:
            self._again = False
            started = self.clock.wall()
            quiet_since = self._quiet_since if self._quiet_since is not None else started
            self._quiet_since = None
            shards, self._read_back = self._read_back, frozenset()
            taken, self._taken_open = self._taken_open, []
            try:
                if taken:
                    await recovery.resume_taken(self.bridge, self.limits, started, taken)
                self.recovered = await recovery.fetch_missed(self.bridge, self.limits, started, quiet_since,
                                                             only=self._on_shards(shards))
            except Exception:  # a bug here must not take the bridge down; the next session tries again
                log.exception("recovery after a new gateway session failed")
                self._on_quiet_at(quiet_since)
                self._read_back = None  # whichever shard starts anew next, every room is read again
            else:
                if self.recovered.failed_rooms:  # read those rooms again after the next session starts
                    self._on_quiet_at(quiet_since)
                    self._read_back = None
                else:
                    self.journal.caught_up(started)
            if not self._again:
                return self.recovered

    def _on_shards(self, shards: ReadBack) -> Callable[[Room], bool] | None:
        """Which rooms a read-back covers: those on ``shards`` (None: every room)."""
        count = self.settings.discord_shard_count
        if shards is None or count is None:
            return None
        return lambda room: room_shard(room, count)[0] in shards

    async def _discord(self) -> None:
        """The gateway; in the postgres profile on the shards whose leases are ours (bridge/shard_leases.py,
        :meth:`~bridge.shard_leases.ShardLeases.gateway_keys`): it opens on that set and opens again on the new set
        whenever it moves (a lease lost, a shard taken for another tree, one handed back). Each shard it still runs
        RESUMEs: a close of ours is a 4000, after which the session stays resumable."""
        if self.leases is None:
            return await self._gateway()
        while True:
            if not self.leases.gateway_keys():
                self.set_status("waiting for the shard lease")
            keys = await self.leases.next_gateway()
            self._unleased_gap = False
            if self.store is not None:
                await self.store.adopt(self.keeper, self.ingress.dedupe, keys, self.settings.lease_ttl_seconds)
            self.gateway_keys = keys
            gateway = asyncio.create_task(self._gateway(keys), name="gateway")
            try:
                while keys == self.leases.gateway_keys():
                    changed = asyncio.create_task(self.leases.changed.wait(), name="leases-changed")
                    try:
                        await asyncio.wait({gateway, changed}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        changed.cancel()
                    if gateway.done():
                        return gateway.result()  # a planned stop, or a refused token
                    self.leases.changed.clear()
            finally:
                gateway.cancel()  # not one more message of a shard no longer ours (or being handed back) is admitted
                await asyncio.gather(gateway, return_exceptions=True)
                self.gateway_keys = []
            if self.keeper is not None:  # closed by us (a 4000: its session stays resumable), seen by no drop event
                for key in keys:
                    self.keeper.dropped(key)

    async def _quiesce(self, key: tuple[int, int]) -> None:
        """Before a shard served for another tree is handed back (bridge/shard_leases.py): the gateway stops running
        it (its session closed with 4000: the claimant RESUMEs it, and Discord keeps what came since), its open
        deliveries end (each turn in flight posts its answer and closes its journal line while the lease is still
        ours; bounded by ``CLANKIE_LEASE_HANDBACK_SECONDS``, past which the claimant's drain runs what is left), and
        the session's sequence and the dedupe changes land in the database. Waits on the injected clock, a tick at
        a time: the journal has no event for 'the last open delivery of one shard closed'."""
        tick = HANDBACK_TICK
        while key in self.gateway_keys:
            await self.clock.sleep(tick)
        deadline = self.clock.monotonic() + self.settings.lease_handback_seconds
        while (open_ := self._open_on(key)) and self.clock.monotonic() < deadline:
            await self.clock.sleep(tick)
        if open_:
            log.warning("shard %d/%d: handed back with %d deliveries open; the tree that takes it runs them", *key, open_)
        if self.keeper is not None:
            self.keeper.flush()
        if self.store is not None:
            try:
                await within(self.store.drained(), self.settings.lease_ttl_seconds)
            except TimeoutError:
                log.warning("shard %d/%d: handed back with %d store changes unwritten", *key, len(self.store.pending))

    def _open_on(self, key: tuple[int, int]) -> int:
        """The deliveries of shard ``key`` this bridge holds open (admitted or waiting, not closed)."""
        count = self.settings.discord_shard_count
        return sum(1 for e in self.journal.state.open_entries() if room_shard(e.room, count) == key)

    async def _hold_leases(self) -> ShardLeases:
        """The postgres profile: a pool (not waited for: an unreachable database is a lease not yet held, tried again
        every renew period) and a keeper for each shard this bridge runs."""
        from bridge.shard_leases import TENURES_FILE, ShardLeases
        from bridge.store_writer import StoreWriter
        from clankie.store.bridge_pg import PgDedupe, PgGatewaySessions
        from clankie.store.database import open_pool
        from clankie.store.leases import TRANSIENT, PgLeases, tree_holder

        s = self.settings
        assert s.postgres_dsn is not None  # the settings refuse postgres without one
        self._pool = await open_pool(s.postgres_dsn.get_secret_value(), ttl=s.lease_ttl_seconds, wait=False)
        pg = PgLeases(self._pool)
        leases = ShardLeases(pg, self.preferred_keys, tree_holder(s.state_dir), self.clock,
                             renew=s.lease_renew_seconds, ttl=s.lease_ttl_seconds,
                             tenures=paths.ensure_private_dir(s.state_dir / "bridge") / TENURES_FILE, on_taken=self._taken,
                             others=self.other_keys, quiesce=self._quiesce)
        self.store = StoreWriter(lambda fence_for: PgGatewaySessions(pg, fence_for),
                                 lambda shard, fence_for: PgDedupe(pg, shard, fence_for), leases.fence_for, self.clock,
                                 transient=TRANSIENT, retry=s.lease_renew_seconds)
        if self.keeper is not None:
            self.keeper.mirror = self.store
        self.bridge.room_ours = self._room_ours
        store, count = self.store, s.discord_shard_count
        self.ingress.on_forget = lambda message_id, room: store.discard(room_shard(room, count), message_id)
        return leases

    def _journal_store(self) -> JournalStore | None:
        """The postgres profile (with a token, so with leases to fence it): the journal's lines in the database, by
        shard; else None (the file)."""
        s = self.settings
        if s.store != "postgres" or s.discord_token is None:
            return None
        from bridge.pg_journal import open_store

        store, self._journal_pool = open_store(s, self.shard_keys,
                                               lambda shard: self.leases.fence_for(shard) if self.leases is not None else None)
        return store

    def _taken(self, shard: tuple[int, int], anew: bool) -> None:
        """The postgres profile: this process took ``shard``'s lease (at start, or from a dead tree): the shard's
        journal is read from the database and its open deliveries drained, before the gateway opens. Taken anew
        (another tree may have answered a delivery it left open), the admitted ones wait for the new session's
        history (:func:`bridge.recovery.resume_taken`). A read the database does not answer is tried again every
        renew period while the shard is ours."""
        try:
            recovery.drain_shard(self.bridge, self.limits, self.clock.wall(), shard,
                                 held_back=self._taken_open if anew else None)
        except JournalRefused as exc:
            log.error("journal: shard %d/%d not drained (%s); trying again", shard[0], shard[1], exc.code)
            task = asyncio.get_running_loop().create_task(self._drain_again(shard, anew), name="journal-drain")
            self._draining.add(task)
            task.add_done_callback(self._draining.discard)
            return
        earlier = self.journal.state.quiet_since()  # a gap the last holder never read back is this tree's to read
        if earlier is not None:
            self._on_quiet_at(earlier)

    async def _drain_again(self, shard: tuple[int, int], anew: bool) -> None:
        await self.clock.sleep(self.settings.lease_renew_seconds)
        if self.leases is None or self.leases.fence_for(f"{shard[0]}/{shard[1]}") is None:
            return  # the lease was lost meanwhile: its next take drains
        held_back = len(self._taken_open)
        self._taken(shard, anew)
        if len(self._taken_open) > held_back and self.port.client is not None:  # the session is up already: read now
            self._on_session(frozenset({shard[0]}))

    def _room_ours(self, room: Room) -> bool:
        """The postgres profile: a reply is posted only while the lease of the room's shard is ours and inside its
        local deadline. A turn whose shard moved while it ran (a pause past the lease, a handback past its bound) is
        the new holder's to answer: its drain runs the delivery again after reading the room. What is left open is the
        one HTTP call between this check and Discord."""
        if self.leases is None:
            return True
        return self.leases.current(self.clock.boottime(), [room_shard(room, self.settings.discord_shard_count)])

    def _unleased(self) -> bool:
        """The postgres profile: whether a message must not be admitted, the shard's lease no longer surely ours (past
        its local deadline: a pause, or renews that have not landed). The first such message sets this process's copy
        of the sessions aside (no sequence moves past a message not admitted) and marks a gap; the gateway's next
        opening adopts each shard's session as its holder left it in the database: Discord replays from there."""
        if self.leases is None or self.leases.current(self.clock.boottime(), self.gateway_keys or None):
            return False
        if not self._unleased_gap:
            self._unleased_gap = True
            log.warning("a message came past the shard lease's deadline: not admitted; the next session reads back")
            self._on_quiet_at(self.clock.wall())
            self._read_back = None
            if self.keeper is not None:
                for key in self.shard_keys:
                    self.keeper.forget(key)
        return True

    async def _gateway(self, keys: list[tuple[int, int]] | None = None) -> None:
        """The gateway session(s), on shards ``keys`` (None: the configured ones), opened again after each failure."""
        assert self.settings.discord_token is not None
        token = self.settings.discord_token.get_secret_value()
        dc.point_at(self.settings.discord_api_base)
        backoff = Backoff(base=1.0, cap=60.0, reset_after=300.0)
        ids = None if keys is None or self.settings.discord_shard_count is None else tuple(i for i, _ in keys)
        while True:
            self.set_status("connecting")
            warm, self._warm = self._warm, None
            if warm is not None and ids is not None and tuple(getattr(warm, "shard_ids", None) or ()) != ids:
                await warm.close()  # logged in for the preferred shards; the gateway runs others now
                warm = None
            client = self._client(ids) if warm is None else self._bound(warm)
            self.port.client = client
            try:
                if warm is None:
                    async with client:
                        await client.start(token)
                else:  # logged in while parked: only the gateway is left (RESUME the stored session)
                    try:
                        await client.connect()
                    finally:
                        await client.close()
                return
            except dc.LoginFailure:
                self.set_status("failed: token rejected")
                raise ConfigError(TOKEN_REJECTED) from None
            except dc.PrivilegedIntentsRequired:
                self.set_status("failed: message content intent not granted")
                raise ConfigError(INTENT_MISSING) from None
            except dc.ConnectionClosed as exc:
                if exc.code == 4004:
                    self.set_status("failed: token rejected")
                    raise ConfigError(TOKEN_REJECTED) from None
                self.set_status(f"failed: gateway closed {exc.code}")
            except (dc.HTTPException, dc.GatewayNotFound, OSError, TimeoutError) as exc:
                self.set_status(f"failed: {type(exc).__name__}")
            finally:
                self.port.client = None
            delay = backoff.delay(self.clock.monotonic())
            log.warning("discord connection failed; retrying in %.1fs", delay)
            await self.clock.sleep(delay)

    def _hooks(self) -> dc.Hooks:
        return dc.Hooks(on_message=self._on_message, on_status=self.set_status, on_owner=self.ingress.owner,
                        on_session=self._on_session, on_quiet=self._on_quiet, on_resumed=self._on_resumed)

    def _bound(self, warm: dc.BridgeClient | dc.ShardedBridgeClient) -> dc.BridgeClient | dc.ShardedBridgeClient:
        """The parked spare's client, now this life's (its hooks and the session keeper)."""
        warm.bind(self._hooks(), self.keeper)
        return warm

    def _client(self, ids: tuple[int, ...] | None = None) -> dc.BridgeClient | dc.ShardedBridgeClient:
        """One plain gateway session, or discord.py's sharded client on shards ``ids`` (None: the configured ones)."""
        discover = bool(self.settings.discord_api_base)
        count = self.settings.discord_shard_count
        if count is None:
            return dc.BridgeClient(
                on_message_cb=self._on_message,
                on_status=self.set_status,
                on_owner=self.ingress.owner,
                on_session=self._on_session,
                on_quiet=self._on_quiet,
                on_resumed=self._on_resumed,
                discover_gateway=discover,
                guild_ready_timeout=self._guild_ready_timeout,
                keeper=self.keeper,
            )
        return dc.ShardedBridgeClient(self._hooks(), shard_count=count, shard_ids=ids or self.settings.discord_shard_ids,
                                      discover_gateway=discover, guild_ready_timeout=self._guild_ready_timeout,
                                      keeper=self.keeper)

    def _on_message(self, message: Any) -> None:
        if self._unleased():
            return
        client = self.port.client
        self_id = client.user.id if client is not None and client.user is not None else None
        try:
            inbound, room, trigger = dc.convert(message, self_id, self.port.system_actors, self.port.trusted_rooms)
        except ValueError:
            log.warning("could not read message %s; dropped", getattr(message, "id", "?"))
            return
        fresh = self.store is not None and not self.ingress.seen(inbound.message_id)
        self.bridge.on_message(inbound, room, trigger)
        if fresh and self.store is not None and self.ingress.seen(inbound.message_id):  # admitted: the shard's now
            # queued before its sequence can be reported (journaled_soon): a stored sequence covers stored ids only
            self.store.retain(room_shard(room, self.settings.discord_shard_count), inbound.message_id,
                              inbound.fingerprint, self.clock.wall() + self.ingress.policy.retention_s)

