"""What a reply is, for tests: the post that settles its delivery, never "the next post in the room".

A turn in tools can put a tool-activity card in the room before its words
(threaded to the same trigger), and on a cold machine it does; a recovered
delivery can find its earlier post; a read-back can see messages from other
deliveries. The one post that *is* the answer is named by the bridge's closing
receipt for the delivery (its id is the trigger's message id): the first of
its ``message_ids``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from clankie.testing.fake_discord import Post

CLOSING = frozenset({"settled", "absorbed", "silent", "failed", "dropped", "expired"})
"""Receipt outcomes that close a delivery (``accepted``, ``recovered``, ``reacted``, … do not)."""


def read_receipts(path: Path) -> list[dict[str, Any]]:
    """The receipts in one JSONL file, oldest first (none while it does not exist)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def closing_receipt(receipts: Iterable[dict[str, Any]], delivery_id: str) -> dict[str, Any] | None:
    """The receipt that closed delivery ``delivery_id``, or None while it is open."""
    return next((r for r in receipts if r["delivery_id"] == delivery_id and r["outcome"] in CLOSING), None)


def settled_reply(posts: Sequence[Post], receipts: Iterable[dict[str, Any]], delivery_id: str) -> Post | None:
    """The reply that settled ``delivery_id``: None while the delivery is open; an AssertionError at once when it
    closed without one (absorbed, silent, failed, …), so a test fails with the reason instead of a time-out."""
    closing = closing_receipt(receipts, delivery_id)
    if closing is None:
        return None
    ids = closing.get("message_ids") or []
    if closing["outcome"] != "settled" or not ids:
        raise AssertionError(f"delivery {delivery_id} closed {closing['outcome']} ({closing.get('reason')}) with no reply")
    post = next((p for p in posts if p.id == ids[0]), None)
    assert post is not None, f"delivery {delivery_id} settled with message {ids[0]}, which Discord never saw"
    assert str((post.message_reference or {}).get("message_id")) == delivery_id, (delivery_id, post)
    return post
