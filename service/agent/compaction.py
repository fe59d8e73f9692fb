"""Pure compaction planning: token estimates, where to cut, and the summary prompt.

The agent compacts when the context exceeds ``context_window - reserve``
(or after a context-overflow error). Older entries are summarised by a model
call; roughly the last ``keep_recent_tokens`` stay verbatim. The cut is made
at a user or assistant message, never at a tool result, so every kept
tool_result still follows its tool_use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from service.agent.outcome import Usage
from service.agent.transcript import SUMMARY_PREFIX, Entry

if TYPE_CHECKING:
    from service.agent.content import Message

IMAGE_TOKENS = 1200

SUMMARY_SYSTEM = (
    "You write compact, faithful summaries of a conversation between users and an assistant "
    "so the assistant can continue it without the original messages."
)
SUMMARY_INSTRUCTIONS = """Summarise the conversation above for the assistant's own later use.
Use these headings: Goal, Constraints, Progress, Key decisions, Open questions, Next steps.
Keep names, numbers, commitments and anything a user asked to remember. Be brief."""


@dataclass(frozen=True, kw_only=True)
class CompactionPlan:
    """What to summarise and what to keep."""

    first_kept_id: str
    summarize: list[Message]
    previous_summary: str | None
    tokens_before: int


def estimate_tokens(message: Message) -> int:
    """A rough token count: characters / 4, images at a flat rate."""
    total = 0
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    for block in blocks:
        if block.get("type") == "image":
            total += IMAGE_TOKENS
        elif block.get("type") == "text":
            total += len(block["text"]) // 4 + 1
        else:
            total += len(json.dumps(block, ensure_ascii=False)) // 4 + 1
    return total


def context_tokens(path: list[Entry]) -> int:
    """Tokens of the current context: the last reported usage plus estimates after it."""
    start = _after_last_compaction(path)
    total = 0
    if start > 0:  # summary plus the kept tail before it (their old usage is stale)
        compaction = path[start - 1]
        total = len(compaction["summary"]) // 4
        kept = next((i for i, e in enumerate(path) if e["id"] == compaction["first_kept_id"]), start)
        total += sum(estimate_tokens(e["message"]) for e in path[kept : start - 1] if e["type"] == "message")
    for entry in path[start:]:
        if entry["type"] != "message":
            continue
        usage = entry.get("usage")
        if usage is not None:  # the provider's count covers everything sent before it
            total = Usage.from_json(usage).context_tokens
        else:
            total += estimate_tokens(entry["message"])
    return total


def plan(path: list[Entry], keep_recent_tokens: int) -> CompactionPlan | None:
    """Choose the cut for a root→leaf path, or None when nothing can be compacted."""
    start = _after_last_compaction(path)
    previous = path[start - 1] if start > 0 else None
    live_from = start
    if previous is not None:
        kept = next((i for i, e in enumerate(path) if e["id"] == previous["first_kept_id"]), start)
        live_from = kept
    candidates = [
        i for i in range(live_from, len(path)) if path[i]["type"] == "message"
    ]
    if len(candidates) < 2:
        return None
    kept_tokens = 0
    cut: int | None = None
    for i in reversed(candidates):  # keep at least the budget, then cut at the next valid point
        kept_tokens += estimate_tokens(path[i]["message"])
        if kept_tokens >= keep_recent_tokens and _cuttable(path[i]):
            cut = i
            break
    if cut is None or cut <= candidates[0]:
        return None
    summarize = [path[i]["message"] for i in candidates if i < cut]
    return CompactionPlan(
        first_kept_id=path[cut]["id"],
        summarize=summarize,
        previous_summary=previous.get("summary") if previous else None,
        tokens_before=context_tokens(path),
    )


def summary_prompt(plan_: CompactionPlan) -> Message:
    """The one user message asking for a summary of the planned span."""
    parts: list[str] = []
    if plan_.previous_summary:
        parts.append(f"<previous-summary>\n{plan_.previous_summary}\n</previous-summary>")
    parts.append("<conversation>")
    for message in plan_.summarize:
        parts.append(f"[{message['role']}] {_flatten(message)}")
    parts.append("</conversation>")
    parts.append(SUMMARY_INSTRUCTIONS)
    return {"role": "user", "content": [{"type": "text", "text": "\n".join(parts)}]}


def _cuttable(entry: Entry) -> bool:
    message = entry["message"]
    if message["role"] == "assistant":
        return True
    content = message.get("content")
    if isinstance(content, str):
        return True
    return not any(b.get("type") == "tool_result" for b in content or [])


def _after_last_compaction(path: list[Entry]) -> int:
    for index in range(len(path) - 1, -1, -1):
        if path[index]["type"] == "compaction":
            return index + 1
    return 0


def _flatten(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    pieces: list[str] = []
    for block in content or []:
        match block.get("type"):
            case "text":
                pieces.append(block["text"])
            case "image":
                pieces.append("[image]")
            case "tool_use":
                pieces.append(f"[tool call {block['name']} {json.dumps(block.get('input'))}]")
            case "tool_result":
                result = block.get("content")
                text = result if isinstance(result, str) else "[content]"
                pieces.append(f"[tool result{' (error)' if block.get('is_error') else ''}: {text}]")
            case _:
                continue
    return " ".join(pieces)


__all__ = ["SUMMARY_PREFIX", "CompactionPlan", "context_tokens", "estimate_tokens", "plan"]
