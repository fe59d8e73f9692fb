"""discord.py at the edge: the REST port and the conversions (the gateway clients are :mod:`bridge.discord_gateway`).

With :mod:`bridge.discord_gateway`, the only module that imports ``discord``. It turns a
``discord.Message`` into the records the core works with, and implements
:class:`bridge.port.DiscordPort` on discord.py's HTTP client (replies threaded
with ``fail_if_not_exists=False``, ``AllowedMentions.none()``, a caller-given
nonce). Pointed at a loopback fake (``CLANKIE_DISCORD_API_BASE``) it sets
``Route.BASE`` and takes the gateway URL from ``GET /gateway/bot``, which a
plain ``discord.Client`` never asks for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import warnings
from collections.abc import Awaitable, Iterator

import aiohttp

with warnings.catch_warnings():
    # discord.py 2.7 imports the stdlib audioop for voice, which we do not use (deprecated in 3.11)
    warnings.filterwarnings("ignore", message="'audioop' is deprecated", category=DeprecationWarning)
    import discord
    from discord.http import MultipartParameters

from bridge.discord_gateway import (  # re-exported: the app reaches the gateway clients through this module
    BridgeClient as BridgeClient,
)
from bridge.discord_gateway import (
    ConnectionClosed as ConnectionClosed,
)
from bridge.discord_gateway import (
    GatewayNotFound as GatewayNotFound,
)
from bridge.discord_gateway import (
    Hooks as Hooks,
)
from bridge.discord_gateway import (
    HTTPException as HTTPException,
)
from bridge.discord_gateway import (
    LoginFailure as LoginFailure,
)
from bridge.discord_gateway import (
    PrivilegedIntentsRequired as PrivilegedIntentsRequired,
)
from bridge.discord_gateway import (
    intents as intents,
)
from bridge.inbound import Inbound
from bridge.port import File, Rejected, Transient
from bridge.sharded_gateway import (
    ShardedBridgeClient as ShardedBridgeClient,
)
from clankie.protocol import Author, HistoryMessage, ImageAttachment, Room, Trigger
from clankie.redact import NOTHING, Redactor

log = logging.getLogger(__name__)

MAX_TRIGGER_TEXT = 8000
MAX_HISTORY_TEXT = 2000
MAX_IMAGES = 4
MAX_IMAGE_BYTES = 8 * 1024 * 1024
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def point_at(api_base: str | None) -> None:
    """Send discord.py's REST calls to ``api_base`` (a loopback fake) instead of Discord."""
    if api_base:
        discord.http.Route.BASE = api_base.rstrip("/")


# ---------------------------------------------------------------- conversions


def _readable(candidates: list[tuple[str, str, str, int]]) -> tuple[ImageAttachment, ...]:
    """The readable images among ``(url, filename, content_type, size)``: allowed type, sane size, at most four."""
    out: list[ImageAttachment] = []
    for url, filename, content_type, size in candidates:
        ctype = content_type.split(";")[0].strip().lower()
        if ctype in IMAGE_TYPES and 0 < size <= MAX_IMAGE_BYTES and url and len(out) < MAX_IMAGES:
            out.append(ImageAttachment(url=url[:2048], filename=filename[:256], content_type=ctype, size=size))
    return tuple(out)


def _images(message: discord.Message) -> tuple[ImageAttachment, ...]:
    return _readable([(a.url, a.filename, a.content_type or "", a.size) for a in message.attachments])


def raw_images(raw: object) -> tuple[ImageAttachment, ...]:
    """The same filter over a REST message's ``attachments`` (plain JSON; anything malformed is skipped)."""
    if not isinstance(raw, list):
        return ()
    candidates = []
    for a in raw:
        if isinstance(a, dict):
            size = a.get("size")
            candidates.append((str(a.get("url") or ""), str(a.get("filename") or ""), str(a.get("content_type") or ""),
                               size if isinstance(size, int) and not isinstance(size, bool) else 0))
    return _readable(candidates)


def convert(
    message: discord.Message,
    self_id: int | None,
    system_actors: frozenset[str],
    trusted_rooms: frozenset[str],
) -> tuple[Inbound, Room, Trigger]:
    """The admission view, the room and the trigger of one Discord message."""
    # after a RESUME in a fresh process there was no READY: no guild is cached and ``message.guild`` is None, but the
    # payload's guild_id is on the channel discord.py made from it (a PartialMessageable); a DM's channel has none
    gid = message.guild.id if message.guild is not None else getattr(message.channel, "guild_id", None)
    guild_id = str(gid) if gid is not None else None
    channel_id = str(message.channel.id)
    author_id = str(message.author.id)
    images = _images(message)
    text = message.content[:MAX_TRIGGER_TEXT]
    mentions_bot = self_id is not None and any(u.id == self_id for u in message.mentions)
    replied = message.reference.resolved if message.reference is not None else None
    replies_to_bot = self_id is not None and isinstance(replied, discord.Message) and replied.author.id == self_id
    inbound = Inbound(
        message_id=str(message.id),
        channel_id=channel_id,
        guild_id=guild_id,
        author_id=author_id,
        text=text,
        author_is_bot=message.author.bot,
        from_self=self_id is not None and message.author.id == self_id,
        mentions_bot=mentions_bot,
        replies_to_bot=replies_to_bot,
        attachment_ids=tuple(str(a.id) for a in message.attachments),
        readable_attachments=len(images),
        refers_to=str(message.reference.message_id) if message.reference and message.reference.message_id else None,
    )
    key = f"{guild_id or 'dm'}:{channel_id}"
    room = Room(
        guild_id=guild_id,
        channel_id=channel_id,
        name=str(getattr(message.channel, "name", "") or "")[:200],
        trusted=key in trusted_rooms or channel_id in trusted_rooms,
    )
    trigger = Trigger(
        message_id=str(message.id),
        author=Author(
            id=author_id,
            name=message.author.name[:200],
            is_bot=message.author.bot,
            is_system_actor=author_id in system_actors,
        ),
        text=text,
        attachments=images,
        at=message.created_at.timestamp(),
    )
    return inbound, room, trigger


# ---------------------------------------------------------------- the REST port


class DiscordPort:
    """:class:`bridge.port.DiscordPort` over the current client's HTTP session."""

    def __init__(self, default_limit: int, *, system_actors: frozenset[str] = frozenset(),
                 trusted_rooms: frozenset[str] = frozenset(), redact: Redactor = NOTHING) -> None:
        self.client: discord.Client | None = None  # a BridgeClient or a ShardedBridgeClient
        self.default_limit = default_limit
        self.system_actors = system_actors
        self.trusted_rooms = trusted_rooms
        self.redact = redact  # the edge: no message or edit carries a secret this process holds (clankie.redact)

    def _client(self) -> discord.Client:
        # Not before login has told us who we are: the REST session can work a moment earlier, but a
        # history read then cannot tell our own messages (is_self) and a resumed reply would be posted twice.
        if self.client is None or self.client.is_closed() or self.client.user is None:
            raise Transient(0, "discord_not_connected")
        return self.client

    async def post(
        self,
        channel_id: str,
        content: str,
        *,
        guild_id: str | None,
        reply_to: str | None,
        files: tuple[File, ...],
        nonce: str | None,
    ) -> str:
        client = self._client()
        content = self.redact(content)
        channel = client.get_partial_messageable(int(channel_id), guild_id=int(guild_id) if guild_id else None)
        reference = None
        if reply_to is not None:
            reference = discord.MessageReference(
                message_id=int(reply_to),
                channel_id=int(channel_id),
                guild_id=int(guild_id) if guild_id else None,
                fail_if_not_exists=False,
            )
        dfiles = [discord.File(io.BytesIO(f.data), filename=f.filename) for f in files]
        with _rest_errors():
            sent = await channel.send(
                content or None,
                reference=reference,  # type: ignore[arg-type]  # discord.py's send() overloads omit None here; it accepts None at runtime
                allowed_mentions=discord.AllowedMentions.none(),
                files=dfiles or None,  # type: ignore[arg-type]  # discord.py's send() overloads omit None here; it accepts None at runtime
                nonce=nonce,  # type: ignore[arg-type]  # discord.py types nonce without None; it sends no nonce for None
            )
        return str(sent.id)

    async def react(self, channel_id: str, message_id: str, emoji: str) -> None:
        await _rest(self._client().http.add_reaction(int(channel_id), int(message_id), emoji))

    async def unreact(self, channel_id: str, message_id: str, emoji: str) -> None:
        await _rest(self._client().http.remove_own_reaction(int(channel_id), int(message_id), emoji))

    async def edit(self, channel_id: str, message_id: str, content: str) -> None:
        params = MultipartParameters(payload={"content": self.redact(content), "allowed_mentions": {"parse": []}},
                                     multipart=None, files=None)
        await _rest(self._client().http.edit_message(int(channel_id), int(message_id), params=params))

    async def delete(self, channel_id: str, message_id: str) -> None:
        await _rest(self._client().http.delete_message(int(channel_id), int(message_id)))

    async def typing(self, channel_id: str) -> None:
        await self._client().http.send_typing(int(channel_id))

    async def history(self, channel_id: str, before: str | None, limit: int) -> list[HistoryMessage]:
        return await self._logs(channel_id, limit, before=int(before) if before else None)

    async def history_after(self, channel_id: str, after: str, limit: int) -> list[HistoryMessage]:
        return await self._logs(channel_id, limit, after=int(after))

    async def _logs(self, channel_id: str, limit: int, *, before: int | None = None,
                    after: int | None = None) -> list[HistoryMessage]:
        client = self._client()
        me = client.user.id if client.user else None
        with _rest_errors():
            raw = await client.http.logs_from(int(channel_id), limit, before=before, after=after)
        out = []
        for m in reversed(raw):  # Discord answers newest first, before or after alike
            author = m.get("author", {})
            ts = discord.utils.parse_time(m.get("timestamp"))
            out.append(
                HistoryMessage(
                    id=str(m["id"]),
                    author_id=str(author.get("id", "")),
                    author_name=str(author.get("username", ""))[:200],
                    is_bot=bool(author.get("bot", False)),
                    is_self=me is not None and str(author.get("id")) == str(me),
                    text=str(m.get("content", ""))[:MAX_HISTORY_TEXT],
                    at=ts.timestamp() if ts else 0.0,
                    attachments=raw_images(m.get("attachments")),
                )
            )
        return out

    async def missed(self, room: Room, after: str, limit: int) -> list[tuple[Inbound, Room, Trigger]]:
        client = self._client()
        self_id = client.user.id if client.user is not None else None
        cid = int(room.channel_id)
        channel = client.get_channel(cid) or client.get_partial_messageable(
            cid, guild_id=int(room.guild_id) if room.guild_id else None
        )
        out: list[tuple[Inbound, Room, Trigger]] = []
        with _rest_errors():
            async for message in channel.history(limit=limit, after=discord.Object(int(after)), oldest_first=True):  # type: ignore[union-attr]  # every channel kind the port resolves has history(); discord.py's union includes ones without
                try:
                    inbound, _, trigger = convert(message, self_id, self.system_actors, self.trusted_rooms)
                except ValueError:
                    continue
                # the journaled room is the truth: a REST message may not say which guild it is in
                out.append((dataclasses.replace(inbound, guild_id=room.guild_id), room, trigger))
        return out

    def active_rooms(self) -> list[tuple[Room, int]]:
        client = self.client
        if client is None:
            return []
        out: list[tuple[Room, int]] = []
        for guild in client.guilds:
            for channel in guild.text_channels:
                if channel.last_message_id:
                    key = f"{guild.id}:{channel.id}"
                    trusted = key in self.trusted_rooms or str(channel.id) in self.trusted_rooms
                    room = Room(guild_id=str(guild.id), channel_id=str(channel.id), name=channel.name[:200], trusted=trusted)
                    out.append((room, channel.last_message_id))
        return out

    def upload_limit(self, guild_id: str | None) -> int:
        client = self.client
        if guild_id is not None and client is not None:
            guild = client.get_guild(int(guild_id))
            if guild is not None:
                return guild.filesize_limit
        return self.default_limit


@contextlib.contextmanager
def _rest_errors() -> Iterator[None]:
    """Map a REST call's failures onto :class:`PostError`: 429, 5xx and connection trouble are transient."""
    try:
        yield
    except discord.RateLimited as exc:
        raise Transient(429, "rate_limited", exc.retry_after) from None
    except discord.HTTPException as exc:
        raise _post_error(exc) from None
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise Transient(0, type(exc).__name__.lower()) from None


async def _rest(call: Awaitable[object]) -> None:
    """Await one REST call whose answer does not matter, its failures mapped by :func:`_rest_errors`."""
    with _rest_errors():
        await call


def _post_error(exc: discord.HTTPException) -> Transient | Rejected:
    status = exc.status
    code = f"http_{status}" + (f"_{exc.code}" if exc.code else "")
    if status == 429:
        retry_after = 1.0
        headers = getattr(exc.response, "headers", None)
        if headers is not None:
            try:
                retry_after = float(headers.get("Retry-After", "1"))
            except ValueError:
                pass
        return Transient(status, code, retry_after)
    if status >= 500:
        return Transient(status, code)
    return Rejected(status, code)
