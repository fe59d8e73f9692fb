"""The fake Discord's records and payloads: what it saw (:class:`Call`, :class:`Post`) and the JSON it serves."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

DISCORD_EPOCH_MS = 1_420_070_400_000
JSON = "application/json"
NONCE_WINDOW_S = 300.0
TIER_LIMITS = {0: 10 * 1024 * 1024, 1: 10 * 1024 * 1024, 2: 50 * 1024 * 1024, 3: 100 * 1024 * 1024}


@dataclass
class Call:
    """One REST request as the fake saw it."""

    method: str
    route: str  # template, e.g. "POST /channels/{id}/messages"
    path: str
    status: int = 200
    json: Any = None
    at: float = 0.0
    query: str = ""  # the query string, e.g. "limit=100&after=123" (history read after a message: a catch-up)


@dataclass
class Post:
    """A message the bot created."""

    id: str
    channel_id: str
    content: str
    message_reference: dict[str, Any] | None
    allowed_mentions: dict[str, Any] | None
    nonce: str | None
    files: list[tuple[str, bytes]] = field(default_factory=list)


@dataclass
class Fault:
    status: int
    retry_after: float = 0.0
    via: bool = True


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def user(uid: str, name: str, *, bot: bool = False) -> dict[str, Any]:
    return {"id": uid, "username": name, "discriminator": "0", "global_name": None, "avatar": None, "bot": bot}


def respond(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON answer saying exactly ``Content-Type: application/json``, as Discord does."""
    body = json.dumps(data).encode()
    return web.Response(body=body, status=status, headers={"Content-Type": JSON, **(headers or {})})


def fault_response(fault: Fault) -> web.Response:
    """A scripted failure: 429 with ``retry_after`` (and Google's ``Via`` unless told not to), or a 5xx."""
    if fault.status == 429:
        headers = {"Via": "1.1 google"} if fault.via else {}
        headers["Retry-After"] = str(fault.retry_after)
        data = {"message": "You are being rate limited.", "retry_after": fault.retry_after, "global": False}
        return respond(data, 429, headers)
    return respond({"message": "Service Unavailable", "code": 0}, fault.status)


def message_payload(mid: str, channel_id: str, guild_id: str | None, author: dict[str, Any], content: str) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": mid,
        "channel_id": channel_id,
        "author": author,
        "content": content,
        "timestamp": now_iso(),
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": False,
        "type": 0,
        "flags": 0,
    }
    if guild_id is not None:
        data["guild_id"] = guild_id
    return data


def channel_payload(gid: str, cid: str, position: int, last_message_id: str | None) -> dict[str, Any]:
    return {"id": cid, "type": 0, "name": f"chan-{cid}", "position": position, "guild_id": gid,
            "permission_overwrites": [], "nsfw": False, "parent_id": None, "topic": None,
            "last_message_id": last_message_id}


def guild_payload(gid: str, channels: list[dict[str, Any]], owner_id: str, premium_tier: int) -> dict[str, Any]:
    everyone = {"id": gid, "name": "@everyone", "permissions": "1024", "position": 0, "color": 0,
                "hoist": False, "managed": False, "mentionable": False}
    return {
        "id": gid, "name": f"guild-{gid}", "icon": None, "owner_id": owner_id,
        "premium_tier": premium_tier, "roles": [everyone], "emojis": [], "stickers": [],
        "features": [], "member_count": 2, "large": False, "unavailable": False,
        "joined_at": now_iso(), "mfa_level": 0, "verification_level": 0, "explicit_content_filter": 0,
        "default_message_notifications": 0, "system_channel_id": None, "afk_channel_id": None,
        "afk_timeout": 300, "preferred_locale": "en-US", "nsfw_level": 0,
        "channels": channels,
        "members": [], "threads": [], "voice_states": [], "presences": [], "stage_instances": [],
        "guild_scheduled_events": [], "soundboard_sounds": [],
    }
