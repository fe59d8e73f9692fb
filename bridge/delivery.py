"""Posting a settled reply: pictures resolved or degraded, words split, retried, never lost.

A reply becomes one or more messages (:mod:`bridge.chunks`). The first is
threaded to the trigger and carries the pictures; each message has a nonce
derived from the delivery id and its index, so a re-send after a fault is
de-duplicated by Discord instead of posted twice. Transient failures (429,
5xx, connection errors) are retried with backoff on the injected clock up to
a bound. If a picture cannot be resolved, or Discord refuses the message that
carries it, the words go out alone with a short note.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from bridge.chunks import split_reply, with_picture_note
from bridge.port import DiscordPort, File, PostError, Transient
from clankie.artifacts import ArtifactError, resolve_artifact
from clankie.backoff import Backoff
from clankie.backoff import RetryPolicy as RetryPolicy  # re-exported: the bridge imports it from here
from clankie.clock import Clock
from clankie.protocol import Code

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_FILES = 10


@dataclass(frozen=True, slots=True)
class Delivered:
    message_ids: tuple[str, ...]
    picture_failures: tuple[str, ...] = ()
    error: str | None = None  # a code when the words could not be posted


def nonce_for(delivery_id: str, kind: str, index: int) -> str:
    """A stable ≤25-character nonce for one message of one delivery."""
    return hashlib.sha256(f"{delivery_id}:{kind}:{index}".encode()).hexdigest()[:25]


def resolve_media(root: Path, refs: tuple[str, ...], limit: int) -> tuple[tuple[File, ...], tuple[str, ...]]:
    """Resolve governed refs to files; returns the files and the failure codes of the rest."""
    files: list[File] = []
    failures: list[str] = []
    budget = limit
    for ref in refs[:MAX_FILES]:
        try:
            got = resolve_artifact(root, ref, budget)
        except ArtifactError as exc:
            failures.append(exc.code)
            continue
        except OSError:
            failures.append(Code.ARTIFACT_UNREADABLE)
            continue
        budget -= len(got.data)
        files.append(File(got.filename, got.data))
    failures.extend(Code.ARTIFACT_TOO_MANY for _ in refs[MAX_FILES:])
    return tuple(files), tuple(failures)


async def post_once(
    port: DiscordPort,
    clock: Clock,
    policy: RetryPolicy,
    channel_id: str,
    content: str,
    *,
    guild_id: str | None,
    reply_to: str | None,
    files: tuple[File, ...] = (),
    nonce: str | None = None,
) -> str:
    """Post one message, retrying transient failures on ``clock``; raises the last :class:`PostError`."""
    return await retry_transient(
        clock, policy, f"post to channel {channel_id}",
        lambda: port.post(channel_id, content, guild_id=guild_id, reply_to=reply_to, files=files, nonce=nonce),
    )


async def retry_transient(clock: Clock, policy: RetryPolicy, what: str, call: Callable[[], Awaitable[T]]) -> T:
    """Run one Discord call, retrying a :class:`Transient` failure on ``policy``'s schedule; raises the last error."""
    backoff = Backoff(policy.base, policy.cap, reset_after=float("inf"))
    for attempt in range(1, policy.attempts + 1):
        try:
            return await call()
        except Transient as exc:
            if attempt == policy.attempts:
                raise
            wait = max(backoff.delay(clock.monotonic()), min(exc.retry_after, policy.max_retry_after))
            log.warning("%s failed (%s), attempt %d; retrying in %.2fs", what, exc.code, attempt, wait)
            await clock.sleep(wait)
    raise AssertionError("unreachable")


async def posted_before(port: DiscordPort, clock: Clock, policy: RetryPolicy, channel_id: str, trigger_id: str,
                        delivery_id: str) -> tuple[tuple[str, str], ...]:
    """Messages this bridge already posted after the trigger (a reply cut short by a crash), oldest first.

    A resumed delivery can come back settled before the gateway is up, so
    a transient failure (not connected yet, 429, 5xx) is retried on the
    same schedule as a post.
    """
    try:
        after = await retry_transient(clock, policy, f"read-back of channel {channel_id}",
                                      lambda: port.history_after(channel_id, trigger_id, 100))
    except PostError as exc:
        log.warning("delivery %s: cannot read back an earlier reply (%s); relying on nonces", delivery_id, exc.code)
        return ()
    return tuple((m.id, m.text) for m in after if m.is_self)


async def deliver_reply(
    port: DiscordPort,
    clock: Clock,
    policy: RetryPolicy,
    *,
    delivery_id: str,
    channel_id: str,
    guild_id: str | None,
    reply_to: str,
    text: str,
    media: tuple[str, ...],
    attachment_root: Path,
    upload_limit: int,
    already: tuple[tuple[str, str], ...] = (),
) -> Delivered:
    """Post a settled reply; the words always go out unless Discord refuses them outright.

    ``already`` lists ``(message id, content)`` of messages this bridge posted
    after the trigger before a crash: a chunk whose exact words are among them
    is not posted again, its id is taken instead.
    """
    words = text.strip()
    files: tuple[File, ...] = ()
    failures: tuple[str, ...] = ()
    if media:  # open + read + sha256 of up to the upload limit: off the event loop
        files, failures = await asyncio.to_thread(resolve_media, attachment_root, media, upload_limit)
    if failures:
        log.warning("delivery %s: picture not attached (%s)", delivery_id, ",".join(failures))
        words = with_picture_note(words)
    posted: list[str] = []
    messages = split_reply(words) if words else []
    if not messages and not files:
        return Delivered((), failures, "reply_empty")
    if not messages:
        messages = [""]
    target = _Target(port, clock, policy, delivery_id, channel_id, guild_id, reply_to, list(already))
    try:
        await target.post_chunks(messages, "reply", posted, files=files)
    except PostError as exc:
        if not (files and not posted):
            return Delivered(tuple(posted), failures, f"reply_{exc.code}")
        # Discord refused the message carrying the picture: send the words without it.
        log.warning("delivery %s: message with picture refused (%s); sending words only", delivery_id, exc.code)
        return await _words_only(target, text, (*failures, f"upload_{exc.code}"))
    return Delivered(tuple(posted), failures)


async def _words_only(target: _Target, text: str, failures: tuple[str, ...]) -> Delivered:
    """Discord refused the message with the picture: post the words and the note, nothing else."""
    posted: list[str] = []
    try:
        await target.post_chunks(split_reply(with_picture_note(text.strip())), "words", posted)
    except PostError as exc:
        return Delivered(tuple(posted), failures, f"reply_{exc.code}")
    return Delivered(tuple(posted), failures)


@dataclass(frozen=True, slots=True)
class _Target:
    """Where one delivery's messages go; the first message of a batch threads to the trigger."""

    port: DiscordPort
    clock: Clock
    policy: RetryPolicy
    delivery_id: str
    channel_id: str
    guild_id: str | None
    reply_to: str
    already: list[tuple[str, str]]

    def _posted_before(self, content: str) -> str | None:
        for i, (mid, text) in enumerate(self.already):
            if text.strip() == content.strip():
                del self.already[i]
                return mid
        return None

    async def post_chunks(
        self, chunks: list[str], kind: str, posted: list[str], *, files: tuple[File, ...] = ()
    ) -> None:
        """Post ``chunks`` in order, appending each message id to ``posted`` (kept on failure)."""
        for i, content in enumerate(chunks):
            first = i == 0
            earlier = self._posted_before(content) if content else None
            if earlier is not None:
                log.info("delivery %s: message %d was posted before a restart; not posting it again", self.delivery_id, i)
                posted.append(earlier)
                continue
            posted.append(
                await post_once(
                    self.port, self.clock, self.policy, self.channel_id, content,
                    guild_id=self.guild_id,
                    reply_to=self.reply_to if first else None,
                    files=files if first else (),
                    nonce=nonce_for(self.delivery_id, kind, i),
                )
            )
