"""The fake Anthropic's prompt cache: usage numbers that respond to ``cache_control`` as the API bills them.

A prefix (tools → system → messages) that ends at a breakpoint is written to
an in-memory cache for the breakpoint's lifetime (``cache_control.ttl``:
``5m``, the default, or ``1h``); a later request that repeats it, found
within ``LOOKBACK_BLOCKS`` blocks back before it expires, is billed as a
cache read, and the read refreshes the entry for its lifetime again. Writes
are billed per breakpoint: the tokens between the read point (or the
previous breakpoint) and a breakpoint are written with that breakpoint's
lifetime, reported as ``cache_creation.ephemeral_5m_input_tokens`` /
``ephemeral_1h_input_tokens`` beside their sum ``cache_creation_input_tokens``.
As the API does, a request whose breakpoints put a shorter lifetime before a
longer one is refused (:func:`ttl_order_error`). Time is the fake's clock.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable
from typing import Any

LOOKBACK_BLOCKS = 20
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
MAX_ENTRIES = 100_000  # live prefixes held; past it the soonest to expire go first


def _strip(block: Any) -> Any:
    if isinstance(block, dict):
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def _ttl(marker: Any) -> str | None:
    """The lifetime a ``cache_control`` marker asks for, or None when there is no marker."""
    if not isinstance(marker, dict):
        return None
    return str(marker.get("ttl", "5m"))


def _segments(body: dict[str, Any]) -> list[tuple[Any, str | None]]:
    """Cacheable blocks in prefix order (tools, system, messages) with their breakpoint's lifetime, if any."""
    out: list[tuple[Any, str | None]] = []
    for tool in body.get("tools") or []:
        out.append((tool, _ttl(tool.get("cache_control"))))
    system = body.get("system")
    if isinstance(system, str) and system:
        out.append(({"type": "text", "text": system}, None))
    elif isinstance(system, list):
        out.extend((b, _ttl(b.get("cache_control"))) for b in system)
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for block in blocks:
            out.append(({"role": message.get("role"), **_strip(block)}, _ttl(block.get("cache_control"))))
    top = _ttl(body.get("cache_control"))
    if top is not None and out:
        out[-1] = (out[-1][0], top)
    return out


def ttl_order_error(body: dict[str, Any]) -> str | None:
    """The API's refusal text when a breakpoint with a longer lifetime follows a shorter one, else None."""
    seen: list[str] = [ttl for _, ttl in _segments(body) if ttl is not None]
    for ttl in seen:
        if ttl not in TTL_SECONDS:
            return f"cache_control.ttl: Input should be '5m' or '1h' (got {ttl!r})"
    for earlier, later in itertools.pairwise(seen):
        if TTL_SECONDS[later] > TTL_SECONDS[earlier]:
            return "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block"
    return None


def estimate_tokens(obj: Any) -> int:
    """The fake's tokenizer: four characters of canonical JSON per token."""
    return max(1, len(json.dumps(_strip(obj), sort_keys=True, ensure_ascii=False)) // 4)


class PromptCache:
    """Prefix hashes written at breakpoints, each live until its lifetime runs out; reads look 20 blocks back."""

    def __init__(self, min_tokens: int = 0, now: Callable[[], float] | None = None) -> None:
        self.min_tokens = min_tokens
        self._now = now or (lambda: 0.0)
        self._expiry: dict[str, tuple[float, float]] = {}  # prefix hash -> (expires at, lifetime s)

    def _live(self, digest: str, now: float) -> bool:
        found = self._expiry.get(digest)
        return found is not None and found[0] > now

    def usage(self, body: dict[str, Any], *, record: bool = True) -> dict[str, Any]:
        """What ``body`` is billed; ``record=False`` asks without touching the cache."""
        now = self._now()
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
        breakpoints = [i for i, (_, ttl) in enumerate(segments) if ttl is not None and cum_tokens[i] >= self.min_tokens]
        read, hit = 0, -1
        for bp in breakpoints:
            for j in range(bp, max(-1, bp - LOOKBACK_BLOCKS - 1), -1):
                if self._live(cum_hash[j], now):
                    if cum_tokens[j] > read:
                        read, hit = cum_tokens[j], j
                    break
        written = {"5m": 0, "1h": 0}
        edge = read
        for bp in breakpoints:
            if cum_tokens[bp] > edge:
                written[str(segments[bp][1])] += cum_tokens[bp] - edge
                edge = cum_tokens[bp]
        if record:
            if hit >= 0:  # a read refreshes the entry for its lifetime
                lifetime = self._expiry[cum_hash[hit]][1]
                self._expiry[cum_hash[hit]] = (now + lifetime, lifetime)
            for bp in breakpoints:
                lifetime = TTL_SECONDS[str(segments[bp][1])]
                old = self._expiry.get(cum_hash[bp])
                if old is None or old[0] < now + lifetime:
                    self._expiry[cum_hash[bp]] = (now + lifetime, max(lifetime, old[1] if old else 0.0))
            self._bound(now)
        write = written["5m"] + written["1h"]
        return {
            "input_tokens": max(0, total - read - write),
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "cache_creation": {"ephemeral_5m_input_tokens": written["5m"], "ephemeral_1h_input_tokens": written["1h"]},
        }

    def _bound(self, now: float) -> None:
        if len(self._expiry) <= MAX_ENTRIES:
            return
        for key in [k for k, (at, _) in self._expiry.items() if at <= now]:
            del self._expiry[key]
        for key, _ in sorted(self._expiry.items(), key=lambda kv: kv[1][0])[: max(0, len(self._expiry) - MAX_ENTRIES)]:
            del self._expiry[key]
