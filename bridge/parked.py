"""A parked spare bridge's client: logged in while the live bridge runs, with no gateway socket of its own.

:func:`log_in_parked` runs in a spare's ``prepare`` (``bridge/__main__.py``);
:class:`bridge.app.BridgeApp` takes the client once the spare is activated and
binds it (:meth:`bridge.discord_gateway.BridgeClient.bind`), so the first
session of that life is only the gateway: the stored session's RESUME.
"""

from __future__ import annotations

import logging

from bridge import discord_client as dc
from bridge.app import GUILD_READY_TIMEOUT
from clankie.settings import Settings
from clankie.waits import within

log = logging.getLogger(__name__)

PARKED_LOGIN_TIMEOUT = 30.0
"""Seconds a spare's login (``/users/@me``, ``/gateway/bot``, the application) may take before it parks cold."""


async def log_in_parked(settings: Settings, *,
                        guild_ready_timeout: float = GUILD_READY_TIMEOUT) -> dc.BridgeClient | dc.ShardedBridgeClient | None:
    """A parked spare's client: logged in (``/users/@me`` known, the HTTP session open), no gateway socket.

    Nothing of the live bridge's is touched: no receipts, journal or stored session is opened (the app that takes
    this client reads those once activated, after the last bridge is gone). A sharded tree's is the sharded client on
    its shards, with no shard launched. None, and the life starts cold, when there is no token or the login fails
    (logged; a rejected token is the cold start's to report, exit 78, as before).
    """
    if settings.discord_token is None:
        return None
    dc.point_at(settings.discord_api_base)
    discover = bool(settings.discord_api_base)
    client: dc.BridgeClient | dc.ShardedBridgeClient
    if settings.discord_shard_count is None:
        client = dc.BridgeClient(on_message_cb=_unbound, on_status=_unbound, on_owner=_unbound,
                                 discover_gateway=discover, guild_ready_timeout=guild_ready_timeout)
    else:
        client = dc.ShardedBridgeClient(dc.Hooks(on_message=_unbound, on_status=_unbound, on_owner=_unbound),
                                        shard_count=settings.discord_shard_count,
                                        shard_ids=settings.discord_shard_ids, discover_gateway=discover,
                                        guild_ready_timeout=guild_ready_timeout)
    try:
        await client.__aenter__()
        await within(client.login(settings.discord_token.get_secret_value()), PARKED_LOGIN_TIMEOUT)
    except Exception as exc:  # any failure (a 401, a network down): the life it becomes starts cold and says why
        log.warning("spare: login failed (%s); the bridge it becomes logs in cold", type(exc).__name__)
        await client.close()
        return None
    return client


def _unbound(*args: object) -> None:
    """A parked client's hooks before :meth:`dc.BridgeClient.bind`: it has no socket, so nothing calls them but login."""
