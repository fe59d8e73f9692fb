"""Lanes: the captain and every room's lane, from an admitted message to how its turn ended.

The facade: :class:`Captain` (one message in, its turn's result out; the operator's aborts and listings), the
lane keys, plans and paths a caller names lanes by, and the count of lanes on disk. Behind it: the lane state machine
(``lane.py``) and its shell (``shell.py``, the one place it is fed), the owner's run (``runner.py``), the live
lanes and their LRU bound (``registry.py``), the words said to the model (``prompt.py``), the lane log, poison
messages, listings and reports.
"""

from service.captain.lanes.captain import SESSION_FAILED, SHUTDOWN_CODE, TEARDOWN_GRACE, Captain, CaptainDeps
from service.captain.lanes.keys import CaptainPaths, LanePlan, parse_room, room_lane_key
from service.captain.lanes.listing import count_disk_lanes

__all__ = [
    "SESSION_FAILED",
    "SHUTDOWN_CODE",
    "TEARDOWN_GRACE",
    "Captain",
    "CaptainDeps",
    "CaptainPaths",
    "LanePlan",
    "count_disk_lanes",
    "parse_room",
    "room_lane_key",
]
