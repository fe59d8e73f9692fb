"""discord.py's gateway client for the bridge's one session, and what it shares with the sharded one.

:class:`BridgeClient` is a plain ``discord.Client`` (one gateway session, every
guild the bot is in). The sharded client, discord.py's ``AutoShardedClient``
on the configured shards, is :class:`bridge.sharded_gateway.ShardedBridgeClient`:
Discord sends it the events of the guilds on those shards, and direct messages
only if shard 0 is among them. Both report the same things to the app: status,
a new session (read back what was missed), a drop (messages may be missed
from now on), a resume (Discord replays the gap); the sharded one works them
out per shard with :class:`bridge.shards.ShardWatch`.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import yarl

with warnings.catch_warnings():
    # discord.py 2.7 imports the stdlib audioop for voice, which we do not use (deprecated in 3.11)
    warnings.filterwarnings("ignore", message="'audioop' is deprecated", category=DeprecationWarning)
    import discord
    from discord.backoff import ExponentialBackoff
    from discord.gateway import DiscordWebSocket, ReconnectWebSocket

from bridge.discord_metrics import count_requests
from bridge.gateway_link import IdentifyGate, IllegalSessionMove, Shard, shard_key
from bridge.gateway_session import REFUSING_CLOSES, SessionKeeper
from bridge.ratelimits import amortise_bucket_sweep
from bridge.shards import ReadBack
from clankie.waits import within

log = logging.getLogger(__name__)


def intents() -> discord.Intents:
    """Guilds, guild and DM messages, and message content (0x9201)."""
    wanted = discord.Intents.none()
    wanted.guilds = True
    wanted.guild_messages = True
    wanted.dm_messages = True
    wanted.message_content = True
    return wanted


def hand_over(deliver: Callable[[discord.Message], None], message: discord.Message) -> bool:
    """Give a new message to the bridge at once, inside discord.py's parse of its event.

    discord.py would schedule a task per ``on_message``; a burst read off the
    socket in one go is parsed without a pause, so thousands of tasks, each
    holding its ``Message``, would be alive at the same time and the heap's
    high-water mark (which the process never hands back) would grow by
    kilobytes per message. Handed over here, each ``Message`` is gone before
    the next event is parsed. A failure is the bridge's bug: logged, and the
    gateway goes on. Returns whether the bridge took it (journaled, or judged and dropped): only then may a
    RESUME start after its sequence.
    """
    try:
        deliver(message)
    except Exception:
        log.exception("the bridge failed on an incoming message")
        return False
    return True


def journaled_soon(keeper: SessionKeeper, shard: Shard, seq: int | None) -> None:
    """Tell ``keeper`` that the event at ``seq`` is journaled, once the turn its hand-over started has run its first
    step, not at once.

    An admitted message's journal line is written by its turn's task (``bridge/turn.py``, before its first await),
    which the hand-over only schedules; a burst is parsed without a pause, so a sequence moved at once could be
    written to the session file before that line, and a SIGKILL between the two lost the message: not in the
    journal, and not replayed by the RESUME (the loaded ``bench/resume.py`` run's one lost message a mode). The
    loop runs callbacks in the order they were scheduled, and the task's first step was scheduled during the
    hand-over, so this one runs after it."""
    asyncio.get_running_loop().call_soon(keeper.journaled, shard, seq)


class Closable(Protocol):
    closing: asyncio.Task[None] | None


Step = Callable[[], Coroutine[Any, Any, None]]


async def close_whole(client: Closable, goodbye: Step, close: Step) -> None:
    """Run ``client``'s ``goodbye`` and then, whatever it did, discord.py's ``close``: once, in a task of its own
    that its waiters' cancellations do not reach.

    A stop cancels the gateway's task, whose close then says goodbye on the socket (4000) before discord.py's own
    close ends the HTTP session; a second cancellation in between (the app stopped while a lease change was closing
    the gateway) used to abandon the close there, and the session's connector was left to the garbage collector,
    which warns ``Unclosed client session`` into whatever runs then (a CI run failed on such a warning). A waiter
    cancelled now gets its ``CancelledError`` at once and the close still runs to its end; every later caller waits
    for the same task."""

    async def whole() -> None:
        try:
            await goodbye()
        finally:
            await close()  # the HTTP session and its connector end here

    if client.closing is None:
        client.closing = asyncio.get_running_loop().create_task(whole(), name="discord-close")
    await asyncio.shield(client.closing)


@dataclass(frozen=True)
class Hooks:
    """What a gateway client tells the app."""

    on_message: Callable[[discord.Message], None]
    on_status: Callable[[str], None]
    on_owner: Callable[[str], None]
    on_session: Callable[[ReadBack], None] = lambda shards: None
    on_quiet: Callable[[], None] = lambda: None
    on_resumed: Callable[[], None] = lambda: None


async def _setup(client: discord.Client, discover: bool, on_owner: Callable[[str], None],
                 on_limit: Callable[[int, int, int], None] | None = None) -> None:
    """Take the gateway URL from ``GET /gateway/bot`` (a loopback fake), report today's session starts (total,
    remaining, and the IDENTIFYs allowed at once: ``max_concurrency``) to ``on_limit``, and report the application's
    owner."""
    if discover or on_limit is not None:
        try:
            _shards, url, limits = await client.http.get_bot_gateway()
        except discord.HTTPException:
            if discover:
                raise
            log.warning("could not read the gateway's session start limit")
        else:
            if discover:
                discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)
                log.info("gateway discovered from the configured API base")
            if on_limit is not None and isinstance(limits, dict):
                total, remaining = limits.get("total"), limits.get("remaining")
                concurrency = limits.get("max_concurrency")
                if isinstance(total, int) and isinstance(remaining, int):
                    on_limit(total, remaining, concurrency if isinstance(concurrency, int) and concurrency > 0 else 1)
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
        on_session: Callable[[ReadBack], None] = lambda shards: None,
        on_quiet: Callable[[], None] = lambda: None,
        on_resumed: Callable[[], None] = lambda: None,
        keeper: SessionKeeper | None = None,
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
        self.keeper = keeper
        self.closing: asyncio.Task[None] | None = None  # close_whole's one task
        self.shard = shard_key(None, None)
        self.owner: str | None = None  # what login learned, for a parked spare's bind()
        self.start_limit: tuple[int, int] | None = None
        self.gate = IdentifyGate()  # one session: one rate-limit key

    async def setup_hook(self) -> None:
        await _setup(self, self._discover, self._owned, self._limited)

    def _owned(self, owner: str) -> None:
        self.owner = owner
        self._on_owner(owner)

    def _limited(self, total: int, remaining: int, _concurrency: int = 1) -> None:
        self.start_limit = (total, remaining)
        if self.keeper is not None:
            self.keeper.limit(total, remaining)

    def bind(self, hooks: Hooks, keeper: SessionKeeper | None) -> None:
        """A parked spare's client, logged in and not connected, becomes this life's: its hooks, its session keeper,
        and what login learned (the owner, today's session starts) told to them as a cold start's login would."""
        self._on_message_cb = hooks.on_message
        self._on_status = hooks.on_status
        self._on_owner = hooks.on_owner
        self._on_session = hooks.on_session
        self._on_quiet = hooks.on_quiet
        self._on_resumed_cb = hooks.on_resumed
        self.keeper = keeper
        if self.owner is not None:
            hooks.on_owner(self.owner)
        if keeper is not None and self.start_limit is not None:
            keeper.limit(*self.start_limit)

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        """This process's first IDENTIFY goes at once, the next ones 5 s apart (:class:`IdentifyGate`), as the sharded
        client's do; discord.py waits 5 s before every IDENTIFY but a client's very first, so a new bridge whose stored
        RESUME was refused waited 5 s for nothing. Starts in a row across processes are the keeper's backoff."""
        if self.keeper is None:
            return await super().before_identify_hook(shard_id, initial=initial)
        await self.keeper.identify_slot(self.gate, 0)
        return None

    async def connect(self, *, reconnect: bool = True) -> None:
        """discord.py's ``Client.connect`` loop (2.7), with the keeper's seams (the module docstring)."""
        keeper = self.keeper
        if keeper is None:
            return await super().connect(reconnect=reconnect)
        backoff = ExponentialBackoff()
        params: dict[str, Any] = {"initial": True, "shard_id": None}
        stored = keeper.stored(self.shard)
        if stored is not None:
            params.update(initial=False, resume=True, session=stored.session_id, sequence=stored.seq,
                          gateway=yarl.URL(stored.resume_url))
        opened = False  # whether this process has had a socket yet
        while not self.is_closed():
            try:
                if params.get("resume"):
                    keeper.resuming(self.shard)
                else:
                    await keeper.identifying(self.shard)
                self.ws = await within(DiscordWebSocket.from_client(self, **params), 60.0)  # HELLO, then RESUME or IDENTIFY
                opened = True
                if not params.get("resume"):
                    keeper.identified(self.shard)
                params["initial"] = False
                while True:
                    await self.ws.poll_event()
            except ReconnectWebSocket as e:
                self.dispatch("disconnect")
                code = self.ws.socket.close_code if self.ws is not None else None
                resume = e.resume and code not in REFUSING_CLOSES
                params.update(sequence=self.ws.sequence, resume=resume, session=self.ws.session_id)
                params["gateway"] = self.ws.gateway if resume else DiscordWebSocket.DEFAULT_GATEWAY
                continue
            except (OSError, discord.HTTPException, discord.GatewayNotFound, discord.ConnectionClosed,
                    aiohttp.ClientError, TimeoutError) as exc:
                self.dispatch("disconnect")
                if not reconnect:
                    await self.close()
                    if isinstance(exc, discord.ConnectionClosed) and exc.code == 1000:
                        return None
                    raise
                if self.is_closed():
                    return None
                if not opened and params.get("resume"):
                    # the stored session's resume URL cannot be reached at all: give the session up, start anew at
                    # the gateway GET /gateway/bot named (a network that is down fails that too, and backs off there)
                    log.warning("gateway: the stored session's resume URL is unreachable (%s); starting a new session",
                                type(exc).__name__)
                    params.update(resume=False, session=None, sequence=None, gateway=DiscordWebSocket.DEFAULT_GATEWAY)
                    continue
                if isinstance(exc, discord.ConnectionClosed):
                    if exc.code == 4014:
                        raise discord.PrivilegedIntentsRequired(exc.shard_id) from None
                    if exc.code != 1000:
                        await self.close()
                        raise
                retry = backoff.delay()
                log.warning("gateway connection lost (%s); reconnecting in %.2fs", type(exc).__name__, retry)
                await asyncio.sleep(retry)
                if self.ws is not None and self.ws.session_id is not None:  # always try to RESUME first, as discord.py does
                    params.update(sequence=self.ws.sequence, gateway=self.ws.gateway, resume=True,
                                  session=self.ws.session_id)
        return None

    async def close(self) -> None:
        """Stop; with a keeper, close the socket with 4000 first, so that the next process can RESUME the session.
        The whole close runs once, to its end, whoever waits for it (:func:`close_whole`)."""
        await close_whole(self, self._goodbye, super().close)

    async def _goodbye(self) -> None:
        ws = self.ws
        if self.keeper is not None and self.keeper.enabled and ws is not None and ws.open:
            try:
                await ws.close(code=4000)
            except Exception:  # the socket is going anyway; the session may then not be resumable
                log.warning("the gateway socket did not close cleanly; the next bridge may IDENTIFY")
            self.keeper.flush()

    async def on_ready(self) -> None:
        """A new gateway session (not a RESUME): Discord will not replay what came before it."""
        self._on_status("connected")
        self._on_session(None)  # one session: every room

    async def on_resumed(self) -> None:
        self._on_status("connected")
        self._on_resumed_cb()

    async def on_disconnect(self) -> None:
        self._on_quiet()
        if not self.is_closed():
            self._on_status("connecting")

    def dispatch(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        if event == "message":
            if hand_over(self._on_message_cb, args[0]) and self.keeper is not None and self.ws is not None:
                journaled_soon(self.keeper, self.shard, self.ws.sequence)
        elif self.keeper is not None:
            self._keep(event)
        super().dispatch(event, *args, **kwargs)

    def _keep(self, event: str) -> None:
        """What the keeper hears of the session, from discord.py's own events (READY's is ``connect``)."""
        assert self.keeper is not None
        ws = self.ws
        try:
            if event == "connect" and ws is not None and ws.session_id is not None:
                self.keeper.ready(self.shard, ws.session_id, str(ws.gateway), ws.sequence)
            elif event == "resumed" and ws is not None:
                self.keeper.resumed(self.shard, ws.sequence)
            elif event == "disconnect":
                self.keeper.dropped(self.shard)
        except IllegalSessionMove:  # our bug: logged, and the gateway goes on
            log.exception("gateway session: %s not expected here", event)


# re-exported so the app can classify start-up failures without importing discord itself
LoginFailure = discord.LoginFailure
PrivilegedIntentsRequired = discord.PrivilegedIntentsRequired
ConnectionClosed = discord.ConnectionClosed
GatewayNotFound = discord.GatewayNotFound
HTTPException = discord.HTTPException
