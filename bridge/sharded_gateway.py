"""discord.py's sharded client for the bridge, each shard's gateway session kept across processes.

:class:`ShardedBridgeClient` is discord.py's ``AutoShardedClient`` running only
the configured shards (``CLANKIE_DISCORD_SHARD_IDS`` of
``CLANKIE_DISCORD_SHARD_COUNT``). With a :class:`~bridge.gateway_session.SessionKeeper`
it does for every shard what :class:`bridge.discord_gateway.BridgeClient` does
for one session, through three seams of discord.py 2.7's ``shard.py``:

* ``launch_shard``: a shard with a stored session connects to its resume URL
  and RESUMEs (``DiscordWebSocket.from_client(resume=True, session=,
  sequence=, gateway=)``); one without IDENTIFYs. A resume URL that cannot be
  reached at all gives the session up and IDENTIFYs at the gateway. The shards
  launch at once (``launch_shards``; discord.py's launch one after another), so
  one shard's replay does not hold the next shard's RESUME back;
* :class:`KeptShard`, discord.py's ``Shard`` whose ``reidentify`` and
  ``reconnect`` go through the keeper: a refused RESUME (op 9, close 4007 or
  4009) IDENTIFYs with the crash-loop backoff, and a dropped socket RESUMEs
  first (discord.py's own ``Shard.reconnect`` always IDENTIFYs);
* ``before_identify_hook``: an IDENTIFY waits for its rate-limit key
  (:class:`~bridge.gateway_link.IdentifyGate`, ``max_concurrency`` from
  ``GET /gateway/bot``) instead of discord.py's 5 s before every IDENTIFY
  but the first; a RESUME waits for nothing.

A message's shard is the one Discord sends it on, worked out from its guild
(``(guild_id >> 22) % count``; a DM is shard 0's), and its sequence is that
shard's socket's: discord.py parses a frame without a pause after setting it.
The sequence moves once the message's journal line is in
(:func:`bridge.discord_gateway.journaled_soon`). The keeper hears READY (``shard_connect``), RESUMED (``shard_resumed``) and a
drop (``shard_disconnect``) per shard. A stop closes every shard's socket with
4000 so the next process can RESUME them. The app hears of the group as a
whole, through :class:`bridge.shards.ShardWatch`.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from typing import Any

import yarl

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="'audioop' is deprecated", category=DeprecationWarning)
    import discord
    from discord.gateway import DiscordWebSocket, ReconnectWebSocket
    from discord.shard import EventItem, EventType, Shard

from bridge.discord_gateway import Hooks, _setup, close_whole, hand_over, intents, journaled_soon
from bridge.discord_metrics import count_requests
from bridge.gateway_link import IdentifyGate, IllegalSessionMove
from bridge.gateway_link import Shard as Key
from bridge.gateway_session import REFUSING_CLOSES, SessionKeeper
from bridge.ratelimits import amortise_bucket_sweep
from bridge.shards import ShardWatch, Up
from clankie.shards import DM_SHARD, shard_of
from clankie.waits import within

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 60.0  # seconds one shard's dial, HELLO and RESUME or IDENTIFY may take (discord.py's own figure)


class KeptShard(Shard):
    """discord.py's ``Shard`` (2.7) whose new connections go through the client's keeper."""

    _client: ShardedBridgeClient

    async def reidentify(self, exc: ReconnectWebSocket) -> None:
        """discord.py asked for a RESUME or an IDENTIFY (op 7, op 9, a closed socket): a refusal IDENTIFYs anew."""
        self._cancel_task()
        self._dispatch("disconnect")
        self._dispatch("shard_disconnect", self.id)
        resume = exc.resume and self.ws.socket.close_code not in REFUSING_CLOSES and self.ws.session_id is not None
        await self._connect(resume)

    async def reconnect(self) -> None:
        """After a drop and discord.py's backoff: RESUME the session if there is one, as a plain client does."""
        self._cancel_task()
        await self._connect(self.ws.session_id is not None)

    async def _connect(self, resume: bool) -> None:
        client = self._client
        try:
            self.ws = await client.open_shard(self.id, resume=resume, gateway=self.ws.gateway,
                                              session=self.ws.session_id, sequence=self.ws.sequence)
        except self._handled_exceptions as e:
            await self._handle_disconnect(e)
        except ReconnectWebSocket as e:
            self._queue_put(EventItem(EventType.resume if e.resume else EventType.identify, self, e))
        except asyncio.CancelledError:
            return
        except Exception as e:
            self._queue_put(EventItem(EventType.terminate, self, e))
        else:
            self.launch()


class ShardedBridgeClient(discord.AutoShardedClient):
    """``AutoShardedClient`` on shards ``shard_ids`` of ``shard_count``, each shard's session kept by ``keeper``."""

    def __init__(
        self,
        hooks: Hooks,
        *,
        shard_count: int,
        shard_ids: tuple[int, ...],
        discover_gateway: bool,
        guild_ready_timeout: float = 2.0,
        keeper: SessionKeeper | None = None,
    ) -> None:
        ids = shard_ids or tuple(range(shard_count))
        super().__init__(
            intents=intents(),
            allowed_mentions=discord.AllowedMentions.none(),
            guild_ready_timeout=guild_ready_timeout,
            enable_debug_events=False,
            max_messages=None,  # no message cache: nothing here reads it, and a burst filled it with 1,000 Messages
            shard_count=shard_count,
            shard_ids=list(ids),
        )
        self.bucket_sweep = amortise_bucket_sweep(self.http)
        count_requests(self.http)  # clankie_discord_requests_total, while metrics are on
        self._bridge = hooks
        self._discover = discover_gateway
        self.keeper = keeper
        self.closing: asyncio.Task[None] | None = None  # close_whole's one task
        self.count = shard_count
        self.watch = ShardWatch(ids)
        self.gate = IdentifyGate()
        self.owner: str | None = None  # what login learned, for a parked spare's bind()
        self.start_limit: tuple[int, int] | None = None

    async def setup_hook(self) -> None:
        await _setup(self, self._discover, self._owned, self._limited)

    def _owned(self, owner: str) -> None:
        self.owner = owner
        self._bridge.on_owner(owner)

    def _limited(self, total: int, remaining: int, concurrency: int) -> None:
        self.start_limit = (total, remaining)
        self.gate = IdentifyGate(concurrency)
        if self.keeper is not None:
            self.keeper.limit(total, remaining)

    def bind(self, hooks: Hooks, keeper: SessionKeeper | None) -> None:
        """A parked spare's client, logged in and not connected, becomes this life's (as ``BridgeClient.bind``)."""
        self._bridge = hooks
        self.keeper = keeper
        if self.owner is not None:
            hooks.on_owner(self.owner)
        if keeper is not None and self.start_limit is not None:
            keeper.limit(*self.start_limit)

    # ------------------------------------------------------------ connecting, through the keeper

    def key(self, shard_id: int) -> Key:
        return (shard_id, self.count)

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        """Wait for this shard's IDENTIFY slot (``max_concurrency``), not discord.py's 5 s before all but the first."""
        if self.keeper is None:
            return await super().before_identify_hook(shard_id, initial=initial)
        await self.keeper.identify_slot(self.gate, shard_id or 0)
        return None

    async def open_shard(self, shard_id: int, *, resume: bool, gateway: yarl.URL | None = None,
                         session: str | None = None, sequence: int | None = None,
                         initial: bool = False) -> DiscordWebSocket:
        """One new connection for ``shard_id``: RESUME ``session`` at ``gateway``, or IDENTIFY at the gateway."""
        keeper = self.keeper
        if keeper is None:
            coro = DiscordWebSocket.from_client(self, initial=initial, shard_id=shard_id, resume=resume,
                                                gateway=gateway if resume else None, session=session, sequence=sequence)
            return await within(coro, CONNECT_TIMEOUT)
        key = self.key(shard_id)
        if resume:
            keeper.resuming(key)
        else:
            await keeper.identifying(key)
        try:
            ws = await within(DiscordWebSocket.from_client(
                self, initial=initial, shard_id=shard_id, resume=resume, gateway=gateway if resume else None,
                session=session if resume else None, sequence=sequence if resume else None), CONNECT_TIMEOUT)
        except BaseException:
            keeper.dropped(key)
            raise
        if not resume:
            keeper.identified(key)
        return ws

    async def launch_shards(self) -> None:
        """Launch every shard at once (discord.py launches them one after another): a RESUME is not rate-limited, and
        one shard's replay must not hold the next shard's RESUME back; the IDENTIFYs among them still take their turn
        at :attr:`gate`."""
        if self.keeper is None or self.shard_count is None or self.is_closed():
            return await super().launch_shards()
        ids = list(self.shard_ids or range(self.shard_count))
        self._connection.shard_count = self.shard_count
        self._connection.shard_ids = ids
        gateway = DiscordWebSocket.DEFAULT_GATEWAY
        await asyncio.gather(*(self.launch_shard(gateway, i, initial=i == ids[0]) for i in ids))
        return None

    async def launch_shard(self, gateway: yarl.URL, shard_id: int, *, initial: bool = False) -> None:
        """The shard's first connection in this process: RESUME its stored session, or IDENTIFY."""
        stored = self.keeper.stored(self.key(shard_id)) if self.keeper is not None else None
        while not self.is_closed():
            try:
                if stored is not None:
                    ws = await self.open_shard(shard_id, resume=True, gateway=yarl.URL(stored.resume_url),
                                               session=stored.session_id, sequence=stored.seq)
                else:
                    ws = await self.open_shard(shard_id, resume=False, initial=initial)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if stored is not None:
                    log.warning("shard %d: the stored session's resume URL is unreachable (%s); starting a new session",
                                shard_id, type(exc).__name__)
                    stored = None
                    continue
                log.warning("shard %d: could not connect (%s); retrying in 5s", shard_id, type(exc).__name__)
                await asyncio.sleep(5.0)
                initial = False
                continue
            shards: dict[int, Shard] = vars(self)["_AutoShardedClient__shards"]
            queue: asyncio.PriorityQueue[EventItem] = vars(self)["_AutoShardedClient__queue"]
            shards[shard_id] = kept = KeptShard(ws, self, queue.put_nowait)
            kept.launch()
            return

    async def close(self) -> None:
        """Stop; with a keeper, close each shard's socket with 4000 first, so that the next process can RESUME them.
        The whole close runs once, to its end, whoever waits for it (:func:`~bridge.discord_gateway.close_whole`)."""
        await close_whole(self, self._goodbye, super().close)

    async def _goodbye(self) -> None:
        if self.keeper is not None and self.keeper.enabled:
            shards: dict[int, Shard] = vars(self).get("_AutoShardedClient__shards", {})
            for shard in list(shards.values()):
                shard._cancel_task()  # its worker must not take the close for a drop and RESUME in this process
                if shard.ws.open:
                    try:
                        await shard.ws.close(code=4000)
                    except Exception:  # the socket is going anyway; that session may then not be resumable
                        log.warning("shard %d: the gateway socket did not close cleanly", shard.id)
            self.keeper.flush()

    # ------------------------------------------------------------ what the app and the keeper hear

    def _all_up(self, up: Up | None) -> None:
        if up is None:
            return
        self._bridge.on_status("connected")
        if up == "session":
            self._bridge.on_session(self.watch.renewed)  # the rooms of the shards that started anew, not all
        else:
            self._bridge.on_resumed()

    async def on_shard_ready(self, shard_id: int) -> None:
        log.info("shard %d: new session", shard_id)
        self._all_up(self.watch.ready(shard_id))

    async def on_shard_resumed(self, shard_id: int) -> None:
        log.info("shard %d: resumed", shard_id)
        self._all_up(self.watch.resumed(shard_id))

    async def on_shard_disconnect(self, shard_id: int) -> None:
        self.watch.dropped(shard_id)
        self._bridge.on_quiet()
        if not self.is_closed():
            self._bridge.on_status("connecting")

    def dispatch(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        if event == "message":
            if hand_over(self._bridge.on_message, args[0]) and self.keeper is not None:
                self._journaled(args[0])
        elif self.keeper is not None and event in ("shard_connect", "shard_resumed", "shard_disconnect"):
            self._keep(event, args[0])
        super().dispatch(event, *args, **kwargs)

    def _ws(self, shard_id: int) -> DiscordWebSocket | None:
        try:
            return self._get_websocket(shard_id=shard_id)
        except KeyError:  # not launched yet in this process
            return None

    def _journaled(self, message: Any) -> None:
        """The message is handed over: its shard's RESUME may start after its sequence once its journal line is in."""
        assert self.keeper is not None
        guild = message.guild.id if message.guild is not None else getattr(message.channel, "guild_id", None)
        shard_id = DM_SHARD if guild is None else shard_of(guild, self.count)
        ws = self._ws(shard_id)
        if ws is not None:
            journaled_soon(self.keeper, self.key(shard_id), ws.sequence)

    def _keep(self, event: str, shard_id: int) -> None:
        """What the keeper hears of one shard's session, from discord.py's per-shard events."""
        assert self.keeper is not None
        key, ws = self.key(shard_id), self._ws(shard_id)
        try:
            if event == "shard_connect" and ws is not None and ws.session_id is not None:
                self.keeper.ready(key, ws.session_id, str(ws.gateway), ws.sequence)
            elif event == "shard_resumed" and ws is not None:
                self.keeper.resumed(key, ws.sequence)
            elif event == "shard_disconnect":
                self.keeper.dropped(key)
        except IllegalSessionMove:  # our bug: logged, and the gateway goes on
            log.exception("gateway session of shard %d: %s not expected here", shard_id, event)
