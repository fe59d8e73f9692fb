"""The settings that bound files, memory and connections: one group of :class:`clankie.settings.Settings`.

A group is a plain pydantic model whose fields :class:`~clankie.settings.Settings`
inherits; it is never built on its own. The comment after a field is its
description in ``docs/settings-reference.md`` (``scripts/gen-docs``).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from clankie.limits import DEFAULT_MAX_INFLIGHT

MAX_SECONDS = 10_000_000.0
"""Upper bound of every duration setting (about 115 days): finite, and far inside what timers accept."""


class BoundsSettings(BaseModel):
    """Files, memory and connections and their bounds (docs/operations.md)."""

    # files and their bounds (docs/operations.md, "Files and their bounds")
    lane_log_rotate_bytes: int = Field(default=1024 * 1024, ge=4096, le=1 << 40)  # service: lane logs
    lane_log_keep_bytes: int = Field(default=512 * 1024 * 1024, ge=4096, le=1 << 50)  # all lane logs together
    audit_rotate_bytes: int = Field(default=16 * 1024 * 1024, ge=4096, le=1 << 40)  # evidence (service), receipts (bridge)
    audit_keep_bytes: int = Field(default=256 * 1024 * 1024, ge=4096, le=1 << 50)  # each of them
    delivery_record_retention_seconds: float = Field(default=7 * 3600.0, gt=0, le=MAX_SECONDS)
    discord_engagement_idle_seconds: float = Field(default=3600.0, gt=0, le=MAX_SECONDS)
    discord_engagement_max_rooms: int = Field(default=10_000, ge=1, le=10_000_000)
    child_log_rotate_bytes: int = Field(default=10 * 1024 * 1024, ge=4096, le=1 << 40)  # supervisor: logs/<child>.log
    child_log_backups: int = Field(default=5, ge=1, le=1000)  # rolled child logs kept (.1 … .N)
    inbound_image_retention_seconds: float = Field(default=86_400.0, gt=0, le=MAX_SECONDS)  # service: fetched images

    # memory and connections and their bounds (docs/operations.md, "Memory and connections and their bounds")
    discord_max_retained: int = Field(default=1_000_000, ge=1000, le=10_000_000)  # bridge: dedupe ids (24 B each); never refuses
    # at most half a connection's in-flight bound: each held turn's call back (history, typing) must fit beside it
    # (at the full bound, 85 of a 2,000 burst were never answered)
    discord_max_turns: int = Field(default=512, ge=1, le=DEFAULT_MAX_INFLIGHT // 2)  # bridge: turns held at once; more wait
    user_turns_per_minute: float = Field(default=6.0, ge=0, le=10_000)  # bridge: new turns a person may start a minute (0: no limit)
    room_turns_per_minute: float = Field(default=30.0, ge=0, le=10_000)  # bridge: new turns a room may start a minute (0: no limit)
    user_steer_share: float = Field(default=0.5, ge=0, le=1)  # bridge: of a turn, what a steer into a live run costs its author's pace
    user_paced_minutes: float = Field(default=1.0, ge=0, le=60)  # bridge: turns a person may have waiting for their pace, in minutes of it
    discord_journal_max_bytes: int = Field(default=256 * 1024 * 1024, ge=65536, le=1 << 50)  # bridge: journal; past it waiting is refused
    stderr_queue_bytes: int = Field(default=1024 * 1024, ge=4096, le=1 << 30)  # supervisor: unwritten stderr lines

