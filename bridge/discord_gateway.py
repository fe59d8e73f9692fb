"""discord.py's gateway clients for the bridge: one session, or a group of shards.

:class:`BridgeClient` is a plain ``discord.Client`` (one gateway session, every
guild the bot is in). :class:`ShardedBridgeClient` is discord.py's
``AutoShardedClient`` running only the configured shards
(``CLANKIE_DISCORD_SHARD_IDS`` of ``CLANKIE_DISCORD_SHARD_COUNT``): Discord
sends it the events of the guilds on those shards, and direct messages only
if shard 0 is among them. Both report the same things to the app: status,
a new session (read back what was missed), a drop (messages may be missed
from now on), a resume (Discord replays the gap); the sharded one works them
out per shard with :class:`bridge.shards.ShardWatch`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yarl

with warnings.catch_warnings():
    # discord.py 2.7 imports the stdlib audioop for voice, which we do not use (deprecated in 3.11)
    warnings.filterwarnings("ignore", message="'audioop' is deprecated", category=DeprecationWarning)
    import discord

from bridge.discord_metrics import count_requests
from bridge.ratelimits import amortise_bucket_sweep
from bridge.shards import ShardWatch, Up

log = logging.getLogger(__name__)


def intents() -> discord.Intents:
    """Guilds, guild and DM messages, and message content (0x9201)."""
    wanted = discord.Intents.none()
    wanted.guilds = True
    wanted.guild_messages = True
    wanted.dm_messages = True
    wanted.message_content = True
    return wanted


def hand_over(deliver: Callable[[discord.Message], None], message: discord.Message) -> None:
    """Give a new message to the bridge at once, inside discord.py's parse of its event.

    discord.py would schedule a task per ``on_message``; a burst read off the
    socket in one go is parsed without a pause, so thousands of tasks, each
    holding its ``Message``, would be alive at the same time and the heap's
    high-water mark (which the process never hands back) would grow by
    kilobytes per message. Handed over here, each ``Message`` is gone before
    the next event is parsed. A failure is the bridge's bug: logged, and the
    gateway goes on.
    """
    try:
        deliver(message)
    except Exception:
        log.exception("the bridge failed on an incoming message")


@dataclass(frozen=True)
class Hooks:
    """What a gateway client tells the app."""

    on_message: Callable[[discord.Message], None]
    on_status: Callable[[str], None]
    on_owner: Callable[[str], None]
    on_session: Callable[[], None] = lambda: None
    on_quiet: Callable[[], None] = lambda: None
    on_resumed: Callable[[], None] = lambda: None


async def _setup(client: discord.Client, discover: bool, on_owner: Callable[[str], None]) -> None:
    """Take the gateway URL from ``GET /gateway/bot`` (a loopback fake) and report the application's owner."""
    if discover:
        _shards, url, _limits = await client.http.get_bot_gateway()
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)
        log.info("gateway discovered from the configured API base")
    try:
        info = await client.application_info()
    except discord.HTTPException as exc:
        log.warning("could not read the application's owner (%s)", exc.status)
        return
    owner = info.team.owner_id if info.team is not None else (info.owner.id if info.owner else None)
    if owner is not None:
        on_owner(str(owner))


class BridgeClient(discord.Client):
    """The gateway client: reports connection status and hands messages to ``on_inbound``."""

    def __init__(
        self,
        *,
        on_message_cb: Callable[[discord.Message], None],
        on_status: Callable[[str], None],
        on_owner: Callable[[str], None],
        discover_gateway: bool,
        guild_ready_timeout: float = 2.0,
        on_session: Callable[[], None] = lambda: None,
        on_quiet: Callable[[], None] = lambda: None,
        on_resumed: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(
            intents=intents(),
            allowed_mentions=discord.AllowedMentions.none(),
            guild_ready_timeout=guild_ready_timeout,
            enable_debug_events=False,
            max_messages=None,  # no message cache: nothing here reads it, and a burst filled it with 1,000 Messages
        )
        self.bucket_sweep = amortise_bucket_sweep(self.http)  # bridge/ratelimits.py: no quadratic walk per new room
        count_requests(self.http)  # clankie_discord_requests_total, while metrics are on
        self._on_message_cb = on_message_cb
        self._on_status = on_status
        self._on_owner = on_owner
        self._on_session = on_session
        self._on_quiet = on_quiet
        self._on_resumed_cb = on_resumed
        self._discover = discover_gateway

    async def setup_hook(self) -> None:
        await _setup(self, self._discover, self._on_owner)

    async def on_ready(self) -> None:
        """A new gateway session (not a RESUME): Discord will not replay what came before it."""
        self._on_status("connected")
        self._on_session()

    async def on_resumed(self) -> None:
        self._on_status("connected")
        self._on_resumed_cb()

    async def on_disconnect(self) -> None:
        self._on_quiet()
        if not self.is_closed():
            self._on_status("connecting")

    def dispatch(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        if event == "message":
            hand_over(self._on_message_cb, args[0])
        super().dispatch(event, *args, **kwargs)


class ShardedBridgeClient(discord.AutoShardedClient):
    """``AutoShardedClient`` on shards ``shard_ids`` of ``shard_count``; the app hears of the group as a whole."""

    def __init__(
        self,
        hooks: Hooks,
        *,
        shard_count: int,
        shard_ids: tuple[int, ...],
        discover_gateway: bool,
        guild_ready_timeout: float = 2.0,
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
        self.watch = ShardWatch(ids)

    async def setup_hook(self) -> None:
        await _setup(self, self._discover, self._bridge.on_owner)

    def _all_up(self, up: Up | None) -> None:
        if up is None:
            return
        self._bridge.on_status("connected")
        if up == "session":
            self._bridge.on_session()
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
            hand_over(self._bridge.on_message, args[0])
        super().dispatch(event, *args, **kwargs)


# re-exported so the app can classify start-up failures without importing discord itself
LoginFailure = discord.LoginFailure
PrivilegedIntentsRequired = discord.PrivilegedIntentsRequired
ConnectionClosed = discord.ConnectionClosed
GatewayNotFound = discord.GatewayNotFound
HTTPException = discord.HTTPException
