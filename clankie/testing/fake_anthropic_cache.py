"""The fake Anthropic's prompt cache: usage numbers that respond to ``cache_control``.

A prefix (tools → system → messages) that ends at a breakpoint is written to
an in-memory cache; a later request that repeats it, found within
``LOOKBACK_BLOCKS`` blocks back, is billed as a cache read.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

LOOKBACK_BLOCKS = 20


def _strip(block: Any) -> Any:
    if isinstance(block, dict):
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def _segments(body: dict[str, Any]) -> list[tuple[Any, bool]]:
    """Cacheable blocks in prefix order (tools, system, messages) with their breakpoint flag."""
    out: list[tuple[Any, bool]] = []
    for tool in body.get("tools") or []:
        out.append((tool, "cache_control" in tool))
    system = body.get("system")
    if isinstance(system, str) and system:
        out.append(({"type": "text", "text": system}, False))
    elif isinstance(system, list):
        out.extend((b, "cache_control" in b) for b in system)
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for block in blocks:
            out.append(({"role": message.get("role"), **_strip(block)}, "cache_control" in block))
    if body.get("cache_control") and out:
        out[-1] = (out[-1][0], True)
    return out


def estimate_tokens(obj: Any) -> int:
    """The fake's tokenizer: four characters of canonical JSON per token."""
    return max(1, len(json.dumps(_strip(obj), sort_keys=True, ensure_ascii=False)) // 4)


class PromptCache:
    """Prefix hashes written at breakpoints; reads are looked up within 20 blocks back."""

    def __init__(self, min_tokens: int = 0) -> None:
        self.min_tokens = min_tokens
        self._written: set[str] = set()

    def usage(self, body: dict[str, Any], *, record: bool = True) -> dict[str, int]:
        """What ``body`` is billed; ``record=False`` asks without writing its breakpoints to the cache."""
        segments = _segments(body)
        digest = hashlib.sha256(str(body.get("model")).encode())
        cum_tokens: list[int] = []
        cum_hash: list[str] = []
        total = 0
        for block, _ in segments:
            total += estimate_tokens(block)
            digest.update(json.dumps(_strip(block), sort_keys=True).encode())
            cum_tokens.append(total)
            cum_hash.append(digest.copy().hexdigest())
        breakpoints = [i for i, (_, bp) in enumerate(segments) if bp and cum_tokens[i] >= self.min_tokens]
        read = 0
        for bp in breakpoints:
            for j in range(bp, max(-1, bp - LOOKBACK_BLOCKS - 1), -1):
                if cum_hash[j] in self._written:
                    read = max(read, cum_tokens[j])
                    break
        write = max(0, cum_tokens[breakpoints[-1]] - read) if breakpoints else 0
        if record:
            self._written.update(cum_hash[i] for i in breakpoints)
        return {
            "input_tokens": max(0, total - read - write),
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
        }
