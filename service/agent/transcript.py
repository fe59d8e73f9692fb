"""Pure: turn a path of session entries into a valid Anthropic ``messages`` list.

Applies the latest compaction (summary, then the kept tail, then what came
after), shows each ``context_note`` entry as a line of its own, merges consecutive same-role messages (so steered messages and tool
results share one user turn, tool results first), and repairs tool pairing:
a ``tool_use`` without a result gets a synthetic error result, and a
``tool_result`` without its ``tool_use`` is dropped.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from service.agent.content import Block, Message

Entry = dict[str, Any]
"""One session-tree line (see :mod:`service.agent.session`)."""

ORPHAN_RESULT = "No result: the tool call was interrupted before it finished."
CONTEXT_NOTE = "context_note"
"""A custom entry whose ``data.text`` the model sees as a user line (the service's own words, never a person's)."""
SUMMARY_PREFIX = "Summary of the earlier conversation (older messages were compacted):\n\n"


def context_messages(path: list[Entry]) -> list[Message]:
    """The API messages for a root→leaf path of entries."""
    return repair(_raw_messages(path))


def _raw_messages(path: list[Entry]) -> list[Message]:
    last_compaction = None
    for index, entry in enumerate(path):
        if entry["type"] == "compaction":
            last_compaction = index
    if last_compaction is None:
        return [m for e in path if (m := _message(e)) is not None]
    compaction = path[last_compaction]
    kept_from = next(
        (i for i, e in enumerate(path) if e["id"] == compaction["first_kept_id"]), last_compaction
    )
    summary: Message = {
        "role": "user",
        "content": [{"type": "text", "text": SUMMARY_PREFIX + compaction["summary"]}],
    }
    tail = path[kept_from:last_compaction] + path[last_compaction + 1 :]
    return [summary] + [m for e in tail if (m := _message(e)) is not None]


def _message(entry: Entry) -> Message | None:
    """The message an entry puts in the context: a conversation message, or a note's line; else None."""
    if entry["type"] == "message":
        message: Message = entry["message"]
        return message if message.get("content") else None
    if entry["type"] == "custom" and entry.get("custom_type") == CONTEXT_NOTE:
        data = entry.get("data")
        text = data.get("text") if isinstance(data, dict) else None
        if isinstance(text, str) and text:
            return {"role": "user", "content": [{"type": "text", "text": text}]}
    return None


def repair(messages: list[Message]) -> list[Message]:
    """Merge same-role neighbours and make every tool_use/tool_result pair valid."""
    merged: list[Message] = []
    for message in messages:
        content = _blocks(message)
        if not content:
            continue
        if merged and merged[-1]["role"] == message["role"]:
            merged[-1]["content"].extend(copy.deepcopy(content))
        else:
            merged.append({"role": message["role"], "content": copy.deepcopy(content)})
    out: list[Message] = []
    pending: list[str] = []  # tool_use ids of the previous assistant message
    for message in merged:
        if message["role"] == "assistant":
            if pending:
                out.append({"role": "user", "content": _orphan_results(pending)})
            pending = [b["id"] for b in message["content"] if b.get("type") == "tool_use"]
            out.append(message)
            continue
        results = [b for b in message["content"] if b.get("type") == "tool_result"]
        others = [b for b in message["content"] if b.get("type") != "tool_result"]
        answered = [b for b in results if b.get("tool_use_id") in pending]
        answered_ids = {b["tool_use_id"] for b in answered}
        missing = [i for i in pending if i not in answered_ids]
        content = answered + _orphan_results(missing) + others
        pending = []
        if content:
            out.append({"role": "user", "content": content})
    if pending:
        out.append({"role": "user", "content": _orphan_results(pending)})
    if out and out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": [{"type": "text", "text": "(conversation resumed)"}]})
    return out


def _blocks(message: Message) -> list[Block]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content or [])


def _orphan_results(ids: list[str]) -> list[Block]:
    return [
        {"type": "tool_result", "tool_use_id": i, "content": ORPHAN_RESULT, "is_error": True}
        for i in ids
    ]
