"""discord.py's REST requests counted for the metrics endpoint: ``clankie_discord_requests_total{route,status_class}``.

:func:`count_requests` wraps one client's ``HTTPClient.request`` (an instance
attribute, as :mod:`bridge.ratelimits` does; the library's class is
untouched), only while metrics are on. ``route`` is discord.py's route
template (``POST /channels/{channel_id}/messages``), never an id, so the
series stay few. ``status_class`` is the final answer after discord.py's own
retries: ``2xx``, ``429``, ``4xx``, ``5xx``, or ``error`` (no answer: the
connection failed or the call was cancelled).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import discord

from clankie.metrics import DISCORD_REQUESTS, METER

log = logging.getLogger(__name__)


def status_class(status: int) -> str:
    """The label for an HTTP status: ``429`` on its own (rate-limit pressure), else its hundred."""
    return "429" if status == 429 else f"{status // 100}xx"


def route_label(route: Any) -> str:
    """``METHOD /template`` of a discord.py ``Route`` (``?`` for one of an unknown shape)."""
    method, path = getattr(route, "method", "?"), getattr(route, "path", "?")
    return f"{method} {path}"


def count_requests(http: Any) -> bool:
    """Count every REST request of this ``HTTPClient`` by route and status class; False (nothing changed) if off or unknown."""
    if not METER.enabled:
        return False
    request: Callable[..., Awaitable[Any]] | None = getattr(http, "request", None)
    if request is None or not callable(request):
        log.warning("discord.py's HTTPClient has no request method; Discord requests are not counted")
        return False

    async def counted(route: Any, **kwargs: Any) -> Any:
        label = route_label(route)
        try:
            result = await request(route, **kwargs)
        except discord.HTTPException as exc:
            METER.count(DISCORD_REQUESTS.of(label, status_class(exc.status)))
            raise
        except BaseException:
            METER.count(DISCORD_REQUESTS.of(label, "error"))
            raise
        METER.count(DISCORD_REQUESTS.of(label, "2xx"))
        return result

    http.request = counted
    return True
