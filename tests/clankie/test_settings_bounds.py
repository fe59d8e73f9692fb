"""The settings of every file's and map's bound (docs/operations.md, "Files and their bounds")."""

from __future__ import annotations

import pytest

from clankie import settings
from clankie.errors import ConfigError


def test_the_bounds_have_their_documented_defaults() -> None:
    s = settings.load({"HOME": "/h"})
    assert (s.lane_log_rotate_bytes, s.lane_log_keep_bytes) == (1 << 20, 512 << 20)
    assert (s.audit_rotate_bytes, s.audit_keep_bytes) == (16 << 20, 256 << 20)
    assert s.delivery_record_retention_seconds == 7 * 3600
    assert (s.discord_engagement_idle_seconds, s.discord_engagement_max_rooms) == (3600, 10_000)
    assert (s.child_log_rotate_bytes, s.child_log_backups) == (10 << 20, 5)
    assert s.inbound_image_retention_seconds == 86_400


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"CLANKIE_LANE_LOG_ROTATE_BYTES": "2097152", "CLANKIE_LANE_LOG_KEEP_BYTES": "1048576"}, "CLANKIE_LANE_LOG_KEEP_BYTES"),
        ({"CLANKIE_AUDIT_KEEP_BYTES": "4096"}, "CLANKIE_AUDIT_KEEP_BYTES"),
        ({"CLANKIE_AUDIT_ROTATE_BYTES": "10"}, "CLANKIE_AUDIT_ROTATE_BYTES"),
        ({"CLANKIE_DELIVERY_RECORD_RETENTION_SECONDS": "0"}, "CLANKIE_DELIVERY_RECORD_RETENTION_SECONDS"),
        ({"CLANKIE_DISCORD_ENGAGEMENT_MAX_ROOMS": "0"}, "CLANKIE_DISCORD_ENGAGEMENT_MAX_ROOMS"),
        ({"CLANKIE_DISCORD_ENGAGEMENT_IDLE_SECONDS": "-1"}, "CLANKIE_DISCORD_ENGAGEMENT_IDLE_SECONDS"),
        ({"CLANKIE_CHILD_LOG_ROTATE_BYTES": "100"}, "CLANKIE_CHILD_LOG_ROTATE_BYTES"),
        ({"CLANKIE_CHILD_LOG_BACKUPS": "0"}, "CLANKIE_CHILD_LOG_BACKUPS"),
        ({"CLANKIE_INBOUND_IMAGE_RETENTION_SECONDS": "0"}, "CLANKIE_INBOUND_IMAGE_RETENTION_SECONDS"),
    ],
)
def test_a_bad_bound_is_one_line_naming_it(env: dict[str, str], name: str) -> None:
    with pytest.raises(ConfigError) as info:
        settings.load({"HOME": "/h", **env})
    assert "\n" not in str(info.value) and name in str(info.value)
