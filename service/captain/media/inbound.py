"""Inbound image attachments: fetched under strict limits, kept privately for a while, shown to the model.

A chat message must never make the service fetch an arbitrary address, so
only ``https`` URLs on Discord's CDN hosts are fetched (plus the exact
origin of ``CLANKIE_DISCORD_API_BASE`` when set: the loopback fake Discord
in tests). Redirects are not followed. Per message at most
:data:`MAX_IMAGES`; per image at most :data:`MAX_BYTES` (checked against the
declared size, ``Content-Length`` and while streaming) within
:data:`FETCH_DEADLINE` seconds; only PNG, JPEG, GIF and WebP, by the
response's ``Content-Type`` *and* by the bytes themselves (a mislabelled
file would make the model API reject the whole turn, and so would a file
over :data:`MODEL_MAX_BYTES`, whose base64 exceeds the API's 5 MiB, or over
8000 px on a side, read from the header by :mod:`service.captain.media.image_size`). A stored image is
``<state>/captain/inbound/<sha256>.<ext>`` (0600) and is pruned
``CLANKIE_INBOUND_IMAGE_RETENTION_SECONDS`` (a day) after its last use. Failures are content-free codes; a failed fetch costs only
the picture, and the prompt says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

from clankie.clock import Clock
from clankie.paths import make_private_dirs
from clankie.protocol import HistoryMessage, ImageAttachment
from service.captain.media.image_size import MAX_SIDE, dimensions, fits_model

log = logging.getLogger(__name__)


ALLOWED_TYPES = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}
MAX_IMAGES = 4
MAX_TURN_IMAGES = 8
"""Per turn, trigger and catch-up backlog together; the trigger's come first, then the newest backlog messages'."""
MAX_BYTES = 5 * 1024 * 1024
MODEL_MAX_BYTES = MAX_BYTES * 3 // 4
"""The model API caps an image's *base64* at 5 MiB: a bigger file would fail the whole turn, so it is not shown."""
FETCH_DEADLINE = 10.0
RETAIN_SECONDS = 24 * 3600.0
PRUNE_EVERY = 3600.0
"""How often the store is swept at most; a shorter retention sweeps four times per retention instead."""
DISCORD_CDN_HOSTS = ("cdn.discordapp.com", "media.discordapp.net")
CHUNK = 64 * 1024

# content-free failure codes, and how the prompt words them
HOST_REFUSED = "image_host_refused"
TYPE_REFUSED = "image_type_refused"
TOO_LARGE = "image_too_large"
TOO_LARGE_FOR_MODEL = "image_too_large_for_model"
TIMEOUT = "image_timeout"
FETCH_FAILED = "image_fetch_failed"
OVER_LIMIT = "image_over_limit"
OVER_TURN_LIMIT = "image_over_turn_limit"
UNREADABLE = "image_unreadable"
OVER_STEER_LIMIT = "image_over_steer_limit"
REASONS = {
    HOST_REFUSED: "not on Discord's image host",
    TYPE_REFUSED: "not a PNG, JPEG, GIF or WebP image",
    TOO_LARGE: "larger than 5 MiB",
    TOO_LARGE_FOR_MODEL: f"too large for you to view (over 3.75 MiB or {MAX_SIDE} px on a side)",
    TIMEOUT: "download took too long",
    FETCH_FAILED: "download failed",
    OVER_LIMIT: f"more than {MAX_IMAGES} images in one message",
    OVER_TURN_LIMIT: f"more than {MAX_TURN_IMAGES} images in one turn",
    UNREADABLE: "stored copy unreadable",
    OVER_STEER_LIMIT: "too many pictures arrived while you were answering",
}


class _Refused(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def sniff(data: bytes) -> str | None:
    """The image type the bytes actually are (by magic number), if an allowed one."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


@dataclass(frozen=True, slots=True)
class FetchPolicy:
    """Which URLs may be fetched: https on the CDN hosts, or exactly the API base's origin."""

    cdn_hosts: tuple[str, ...] = DISCORD_CDN_HOSTS
    extra_origin: tuple[str, str, int] | None = None  # (scheme, host, port) of CLANKIE_DISCORD_API_BASE

    @classmethod
    def for_api_base(cls, api_base: str | None) -> FetchPolicy:
        origin = _origin(api_base) if api_base else None
        return cls(extra_origin=origin)

    def allows(self, url: str) -> bool:
        origin = _origin(url)
        if origin is None:
            return False
        if origin == self.extra_origin:
            return True
        scheme, host, port = origin
        return scheme == "https" and port == 443 and host in self.cdn_hosts

    def precheck(self, attachment: ImageAttachment, max_bytes: int) -> str | None:
        """A refusal code decided from the attachment record alone (no network), or None."""
        if not self.allows(attachment.url):
            return HOST_REFUSED
        declared = attachment.content_type.split(";")[0].strip().lower()
        if declared and declared not in ALLOWED_TYPES:
            return TYPE_REFUSED
        if attachment.size > max_bytes:
            return TOO_LARGE
        return None


def _origin(url: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if scheme not in ("http", "https") or not host or parts.username or parts.password:
        return None
    return scheme, host, port if port is not None else (443 if scheme == "https" else 80)


@dataclass(frozen=True, slots=True)
class InboundImages:
    """A trigger's images as fetched: the stored files (in order) and a code per image that was not."""

    paths: tuple[Path, ...] = ()
    failed: tuple[str, ...] = ()

    def missing(self) -> tuple[str, ...]:
        """Why each image that is not shown is not, in plain words (what the prompt tells the model)."""
        return tuple(REASONS[c] for c in self.failed)

    def without_files(self, reason: str = UNREADABLE) -> InboundImages:
        """The same images, none shown (by default: the stored copies could not be read after all)."""
        return InboundImages(failed=self.failed + (reason,) * len(self.paths))


NO_IMAGES = InboundImages()


@dataclass(frozen=True, slots=True)
class TurnImages:
    """A turn's images: the trigger's, and each catch-up backlog message's (oldest first, only those with any)."""

    trigger: InboundImages = NO_IMAGES
    backlog: tuple[tuple[str, InboundImages], ...] = ()  # (message id, its images)

    def shown_for(self, context_ids: frozenset[str]) -> tuple[tuple[str, InboundImages], ...]:
        """The backlog entries whose message is in the prompt's context (an image is never shown without its line)."""
        return tuple((mid, imgs) for mid, imgs in self.backlog if mid in context_ids)

    @property
    def has_files(self) -> bool:
        return bool(self.trigger.paths) or any(imgs.paths for _, imgs in self.backlog)

    @property
    def count(self) -> int:
        """Stored images the turn would show."""
        return len(self.trigger.paths) + sum(len(imgs.paths) for _, imgs in self.backlog)

    def without_files(self, reason: str = UNREADABLE) -> TurnImages:
        return TurnImages(self.trigger.without_files(reason), tuple((mid, imgs.without_files(reason)) for mid, imgs in self.backlog))


NO_TURN_IMAGES = TurnImages()


class ImageFetcher:
    """Fetches a trigger's image attachments into ``root``; one pooled HTTP client, opened lazily."""

    def __init__(
        self,
        root: Path,
        policy: FetchPolicy,
        clock: Clock,
        *,
        deadline: float = FETCH_DEADLINE,
        max_bytes: int = MAX_BYTES,
        retain_seconds: float = RETAIN_SECONDS,
    ) -> None:
        self.root = root
        self.retain_seconds = retain_seconds
        self.policy = policy
        self._clock = clock
        self.deadline = deadline
        self.max_bytes = max_bytes
        self._session: aiohttp.ClientSession | None = None
        self._last_prune: float | None = None

    async def fetch_turn(self, trigger: Sequence[ImageAttachment], backlog: Sequence[HistoryMessage]) -> TurnImages:
        """A turn's images, at most :data:`MAX_TURN_IMAGES` fetched: the trigger's first, then the backlog's newest first."""
        budget = MAX_TURN_IMAGES - min(len(trigger), MAX_IMAGES)
        plan: list[tuple[HistoryMessage, int]] = []
        for m in reversed(backlog):
            if m.attachments:
                take = max(0, min(len(m.attachments), MAX_IMAGES, budget))
                budget -= take
                plan.append((m, take))
        plan.reverse()
        got = await asyncio.gather(self.fetch_all(trigger), *(self.fetch_all(m.attachments, allowed=n) for m, n in plan))
        return TurnImages(got[0], tuple((m.id, imgs) for (m, _), imgs in zip(plan, got[1:], strict=True)))

    async def fetch_all(self, attachments: Sequence[ImageAttachment], allowed: int = MAX_IMAGES) -> InboundImages:
        """Fetch up to :data:`MAX_IMAGES` (or ``allowed``, what the turn has left) concurrently; never raises for a bad image."""
        if not attachments:
            return NO_IMAGES
        self._maybe_prune()
        per_message = min(len(attachments), MAX_IMAGES)
        allowed = max(0, min(allowed, per_message))
        results = await asyncio.gather(*(self.fetch(a) for a in attachments[:allowed]))
        paths = tuple(p for p in results if isinstance(p, Path))
        failed = (
            tuple(c for c in results if isinstance(c, str))
            + (OVER_LIMIT,) * (len(attachments) - per_message)
            + (OVER_TURN_LIMIT,) * (per_message - allowed)
        )
        if failed:
            log.info("inbound images: %d stored, not shown: %s", len(paths), ",".join(failed))
        return InboundImages(paths=paths, failed=failed)

    async def fetch(self, attachment: ImageAttachment) -> Path | str:
        """The stored file, or a failure code."""
        code = self.policy.precheck(attachment, self.max_bytes)
        if code is not None:
            return code
        try:
            async with asyncio.timeout(self.deadline):
                data, content_type = await self._download(attachment.url)
        except _Refused as refused:
            return refused.code
        except TimeoutError:
            return TIMEOUT
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            log.info("inbound image fetch failed (%s)", type(exc).__name__)
            return FETCH_FAILED
        actual = sniff(data)
        if actual is None or content_type not in ALLOWED_TYPES:
            return TYPE_REFUSED
        if len(data) > MODEL_MAX_BYTES:
            return TOO_LARGE_FOR_MODEL
        size = dimensions(data)
        if size is None:  # a header that cannot be read: the model API would reject it too
            return TYPE_REFUSED
        if not fits_model(size):
            return TOO_LARGE_FOR_MODEL
        try:
            return self._store(data, ALLOWED_TYPES[actual])
        except OSError as exc:
            log.warning("inbound image not stored (%s)", type(exc).__name__)
            return FETCH_FAILED

    async def _download(self, url: str) -> tuple[bytes, str]:
        session = self._client()
        async with session.get(url, allow_redirects=False) as resp:
            if resp.status != 200:
                raise _Refused(FETCH_FAILED)
            content_type = resp.content_type.lower()
            if content_type not in ALLOWED_TYPES:
                raise _Refused(TYPE_REFUSED)
            if resp.content_length is not None and resp.content_length > self.max_bytes:
                raise _Refused(TOO_LARGE)
            chunks, total = [], 0
            async for chunk in resp.content.iter_chunked(CHUNK):
                total += len(chunk)
                if total > self.max_bytes:
                    raise _Refused(TOO_LARGE)
                chunks.append(chunk)
            return b"".join(chunks), content_type

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                trust_env=False,  # no proxy from the environment
                connector=aiohttp.TCPConnector(limit=16),
                headers={"User-Agent": "clankie-captain"},
            )
        return self._session

    def _store(self, data: bytes, ext: str) -> Path:
        make_private_dirs(self.root)
        path = self.root / f"{hashlib.sha256(data).hexdigest()}.{ext}"
        if path.exists():
            os.utime(path, (self._clock.wall(), self._clock.wall()))  # in use again: keep it another day
            return path
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.utime(tmp, (self._clock.wall(), self._clock.wall()))
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        return path

    def _maybe_prune(self) -> None:
        now = self._clock.monotonic()
        if self._last_prune is None or now - self._last_prune >= min(PRUNE_EVERY, self.retain_seconds / 4):
            self._last_prune = now
            removed = self.prune()
            if removed:
                log.info("pruned %d inbound images unused for %.0f s", removed, self.retain_seconds)

    def prune(self) -> int:
        """Remove stored images last used longer ago than the retention (by the clock's wall time)."""
        cutoff = self._clock.wall() - self.retain_seconds
        removed = 0
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.root):
                with contextlib.suppress(OSError):
                    if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(entry.path)
                        removed += 1
        return removed

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
