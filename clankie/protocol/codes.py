"""Every wire error code, in one enum.

A code travels in a response's ``error.code``, in a failed ``TurnResult.code``,
in receipts and in ``ResolveReply``/``DoctorCheck``. ``Code`` is a ``StrEnum``:
a member *is* its string, so the bytes on the wire are unchanged and a peer
still compares against plain strings.
"""

from __future__ import annotations

from enum import StrEnum


class Code(StrEnum):
    # connection layer (clankie.connection, clankie.framing)
    INVALID_REQUEST = "invalid_request"
    METHOD_NOT_FOUND = "method_not_found"
    INTERNAL_ERROR = "internal_error"
    CANCELLED = "cancelled"
    PROTOCOL_MISMATCH = "protocol_mismatch"
    MESSAGE_TOO_LARGE = "message_too_large"
    SHUTTING_DOWN = "shutting_down"
    TOO_MANY_REQUESTS = "too_many_requests"
    # service
    INVALID_ROOM = "invalid_room"
    DELIVERY_CONFLICT = "delivery_conflict"
    SERVICE_DISK_FULL = "service_disk_full"
    SERVICE_DISK_ERROR = "service_disk_error"
    CAPTAIN_SESSION_FAILED = "captain_session_failed"
    CAPTAIN_PROVIDER_UNCONFIGURED = "captain_provider_unconfigured"
    CAPTAIN_USAGE_LIMIT_REACHED = "captain_usage_limit_reached"
    CAPTAIN_MODEL_FAILED = "captain_model_failed"
    CAPTAIN_RESPONSE_MISSING = "captain_response_missing"
    CAPTAIN_TURN_STALLED = "captain_turn_stalled"
    CAPTAIN_BUDGET_EXHAUSTED = "captain_budget_exhausted"  # a day budget (tree, room, person) is spent: no model call
    CAPTAIN_RUN_BUDGET_EXCEEDED = "captain_run_budget_exceeded"  # a per-run cap was reached, with no words to post
    CAPTAIN_SHARD_MOVED = "captain_shard_moved"  # the PostgreSQL profile: the room's shard is another tree's now
    INVALID_BUDGET = "invalid_budget"  # clankiectl budget: an unknown key or action
    # bridge
    BRIDGE_INTERNAL_ERROR = "bridge_internal_error"
    DELIVERY_NOT_HELD = "delivery_not_held"
    DM_NOT_ALLOWED = "dm_not_allowed"
    ROOM_NOT_ADMITTED = "room_not_admitted"
    HISTORY_UNAVAILABLE = "history_unavailable"
    TEXT_UPDATE_FAILED = "text_update_failed"
    ARTIFACT_UNREADABLE = "artifact_unreadable"
    ARTIFACT_TOO_MANY = "artifact_too_many"
    # artifacts (clankie.artifacts: resolving a ref)
    ARTIFACT_REF_INVALID = "artifact_ref_invalid"
    ARTIFACT_ROOT_UNAVAILABLE = "artifact_root_unavailable"
    ARTIFACT_MISSING = "artifact_missing"
    ARTIFACT_OUTSIDE_ROOT = "artifact_outside_root"
    ARTIFACT_NOT_A_FILE = "artifact_not_a_file"
    ARTIFACT_TOO_LARGE = "artifact_too_large"
    ARTIFACT_HASH_MISMATCH = "artifact_hash_mismatch"
    # hosts
    ARTIFACT_WRITE_FAILED = "artifact_write_failed"
    HOST_INTERNAL_ERROR = "host_internal_error"
    BROWSER_UNAVAILABLE = "browser_unavailable"
    BROWSER_CRASHED = "browser_crashed"
    BROWSER_TIMEOUT = "browser_timeout"
    BROWSER_URL_REFUSED = "browser_url_refused"
    BROWSER_NAVIGATION_FAILED = "browser_navigation_failed"
    BROWSER_IMAGE_TOO_LARGE = "browser_image_too_large"
    BROWSER_SANDBOX_UNAVAILABLE = "browser_sandbox_unavailable"
    DIAGRAM_ERROR = "diagram_error"
    DIAGRAM_INVALID = "diagram_invalid"
    DIAGRAM_TOO_LARGE = "diagram_too_large"
    RENDER_FAILED = "render_failed"
    # sockets: a peer refused (clankie.peers, clankie.ipc)
    PEER_UID_REFUSED = "peer_uid_refused"
    PEER_NOT_ALLOWED = "peer_not_allowed"
    PEER_IN_TREE = "peer_in_tree"
    PEER_UNPROVEN = "peer_unproven"
    # supervisor
    NO_SUCH_CHILD = "no_such_child"
    SERVICE_UNAVAILABLE = "service_unavailable"
    SERVICE_TIMEOUT = "service_timeout"
    ATTACHMENT_ROOT_MISMATCH = "attachment_root_mismatch"
    NO_LOG_FILE = "no_log_file"  # clankiectl logs supervisor: under systemd (the journal has it), or no file kept
    # supervisor: doctor, per side of a writer -> reader check
    WRITER_NOT_RUNNING = "writer_not_running"
    WRITER_TIMEOUT = "writer_timeout"
    READER_NOT_RUNNING = "reader_not_running"
    READER_TIMEOUT = "reader_timeout"
