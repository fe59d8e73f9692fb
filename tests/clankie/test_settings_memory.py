"""The settings of the in-memory and connection bounds (docs/operations.md, "Memory and connections and their bounds")."""

from __future__ import annotations

import pytest

from bridge.app import policy
from clankie import settings
from clankie.errors import ConfigError


def test_the_memory_bounds_have_their_documented_defaults_and_reach_the_bridge() -> None:
    """The dedupe bound (1,000,000 ids, 24 bytes each) and the turn cap reach the bridge's policy, with the horizon
    the dedupe keeps past its bound."""
    s = settings.load({"HOME": "/h"})
    assert (s.discord_max_retained, s.discord_max_turns) == (1_000_000, 512)
    p = policy(settings.load({"HOME": "/h", "CLANKIE_DISCORD_MAX_RETAINED": "1000", "CLANKIE_DISCORD_MAX_TURNS": "7",
                              "CLANKIE_RECOVERY_HORIZON_SECONDS": "600"}))
    assert (p.max_retained, p.max_turns, p.horizon_s) == (1000, 7, 600.0)


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"CLANKIE_DISCORD_MAX_RETAINED": "999"}, "CLANKIE_DISCORD_MAX_RETAINED"),
        ({"CLANKIE_DISCORD_MAX_TURNS": "0"}, "CLANKIE_DISCORD_MAX_TURNS"),
        # above half the connection's in-flight cap: every held turn's call back to the bridge must fit beside it
        ({"CLANKIE_DISCORD_MAX_TURNS": "513"}, "CLANKIE_DISCORD_MAX_TURNS"),
        ({"CLANKIE_STDERR_QUEUE_BYTES": "100"}, "CLANKIE_STDERR_QUEUE_BYTES"),
    ],
)
def test_a_bad_memory_bound_is_one_line_naming_it(env: dict[str, str], name: str) -> None:
    with pytest.raises(ConfigError) as info:
        settings.load({"HOME": "/h", **env})
    assert "\n" not in str(info.value) and name in str(info.value)
