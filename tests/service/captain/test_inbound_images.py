"""Inbound image attachments: fetched under strict limits from Discord's hosts only, and shown to the model."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import io
import os
import stat
import struct
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from PIL import Image

from clankie.protocol import Author, HistoryMessage, ImageAttachment, Room, Trigger, TurnSubmit
from clankie.testing import fake_anthropic as fa
from clankie.testing.clock import FakeClock
from clankie.testing.fake_anthropic import FakeAnthropic
from service.captain.media import inbound
from service.captain.media.inbound import FetchPolicy, ImageFetcher
from tests.polling import until
from tests.service.captain.harness import FakeBridge, msg, run, service, user_texts

BIG = inbound.MAX_BYTES + 1


def png_bytes(color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4, 4), color).save(out, "PNG")
    return out.getvalue()


PNG = png_bytes()
# a PNG header claiming 9000 x 4 px: small in bytes, too wide for the model API
HUGE_PNG = PNG[:16] + struct.pack(">II", 9000, 4) + PNG[24:]


class ImageServer:
    """A real aiohttp server standing in for Discord's CDN; counts requests per path."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.release = asyncio.Event()
        self.runner: web.AppRunner | None = None
        self.base = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/{name}", self.handle)
        self.runner = web.AppRunner(app, shutdown_timeout=0.2, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.base = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    async def close(self) -> None:
        self.release.set()
        if self.runner is not None:
            await self.runner.cleanup()

    def url(self, name: str) -> str:
        return f"{self.base}/{name}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        self.hits[name] += 1
        if name == "a.png":
            return web.Response(body=PNG, content_type="image/png")
        if name == "b.png":
            return web.Response(body=png_bytes((10, 200, 10)), content_type="image/png")
        if name == "huge.png":
            return web.Response(body=HUGE_PNG, content_type="image/png")
        if name == "headless.png":
            return web.Response(body=PNG[:20], content_type="image/png")
        if name == "page.html":
            return web.Response(text="<html>hi</html>", content_type="text/html")
        if name == "liar.png":
            return web.Response(body=b"<html>not a picture</html>", content_type="image/png")
        if name == "redirect.png":
            raise web.HTTPFound("/a.png")
        if name == "model-big.png":
            return web.Response(body=PNG + b"\0" * (inbound.MODEL_MAX_BYTES + 1 - len(PNG)), content_type="image/png")
        if name in ("declared-big.png", "streamed-big.png", "slow.png"):
            return await self._stream(request, name)
        raise web.HTTPNotFound()

    async def _stream(self, request: web.Request, name: str) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "image/png"})
        if name == "declared-big.png":
            resp.content_length = BIG
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            await resp.prepare(request)
            if name == "slow.png":
                await resp.write(PNG[:8])
                await self.release.wait()
            elif name == "declared-big.png":
                await resp.write(PNG)
                await self.release.wait()
            else:
                chunk = PNG + b"\0" * (256 * 1024 - len(PNG))
                for _ in range(BIG // len(chunk) + 2):
                    await resp.write(chunk)
        return resp


@contextlib.asynccontextmanager
async def image_server() -> AsyncIterator[ImageServer]:
    server = ImageServer()
    await server.start()
    try:
        yield server
    finally:
        await server.close()


def attachment(url: str, **fields: Any) -> ImageAttachment:
    return ImageAttachment(url=url, filename="pic.png", **fields)


def fetcher(tmp_path: Path, server: ImageServer, **options: Any) -> ImageFetcher:
    return ImageFetcher(tmp_path / "inbound", FetchPolicy.for_api_base(server.base), FakeClock(), **options)


def image_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        b
        for m in body["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "image"
    ]


# ---------------------------------------------------------------------- policy (pure)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://cdn.discordapp.com/attachments/1/2/pic.png?ex=1", True),
        ("https://media.discordapp.net/attachments/1/2/pic.png", True),
        ("https://CDN.DISCORDAPP.COM/attachments/1/2/pic.png", True),
        ("http://cdn.discordapp.com/attachments/1/2/pic.png", False),
        ("https://cdn.discordapp.com:8443/pic.png", False),
        ("https://evil.example/pic.png", False),
        ("https://cdn.discordapp.com.evil.example/pic.png", False),
        ("https://user@cdn.discordapp.com/pic.png", False),
        ("file:///etc/passwd", False),
        ("https://127.0.0.1/pic.png", False),
        ("not a url", False),
    ],
)
def test_only_discord_cdn_https_urls_are_fetchable(url: str, allowed: bool) -> None:
    """A chat message can only make the service fetch https from Discord's CDN hosts, nothing else."""
    assert FetchPolicy.for_api_base(None).allows(url) is allowed


def test_the_api_base_origin_is_allowed_exactly() -> None:
    """With a fake Discord configured, its exact origin is fetchable too, but not another port on the same host."""
    policy = FetchPolicy.for_api_base("http://127.0.0.1:5005/api/v10")
    assert policy.allows("http://127.0.0.1:5005/attachments/a.png")
    assert not policy.allows("http://127.0.0.1:5006/attachments/a.png")
    assert not policy.allows("https://127.0.0.1:5005/attachments/a.png")


def test_sniff_recognises_the_four_allowed_types_only() -> None:
    """The stored file's type comes from its bytes, and only PNG, JPEG, GIF and WebP pass."""
    assert inbound.sniff(PNG) == "image/png"
    assert inbound.sniff(b"\xff\xd8\xff\xe0rest") == "image/jpeg"
    assert inbound.sniff(b"GIF89a....") == "image/gif"
    assert inbound.sniff(b"RIFF\0\0\0\0WEBPVP8 ") == "image/webp"
    assert inbound.sniff(b"<svg xmlns='http://www.w3.org/2000/svg'/>") is None


# ---------------------------------------------------------------------- fetching (real HTTP)


def test_an_allowed_image_is_stored_privately_by_its_hash(tmp_path: Path) -> None:
    """An allowed image lands as inbound/<sha256>.png, mode 0600, byte for byte."""

    async def body() -> None:
        async with image_server() as server:
            f = fetcher(tmp_path, server)
            try:
                got = await f.fetch_all([attachment(server.url("a.png"), content_type="image/png", size=len(PNG))])
            finally:
                await f.aclose()
            assert got.failed == ()
            (path,) = got.paths
            assert path == tmp_path / "inbound" / f"{hashlib.sha256(PNG).hexdigest()}.png"
            assert path.read_bytes() == PNG
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700

    run(body())


def test_refused_hosts_are_never_contacted(tmp_path: Path) -> None:
    """A URL outside the allowed hosts (or the right host on another port) is refused without a request."""

    async def body() -> None:
        async with image_server() as server:
            f = fetcher(tmp_path, server)
            other_port = server.url("a.png").replace(server.base, server.base.rsplit(":", 1)[0] + ":1")
            try:
                got = await f.fetch_all([attachment("https://evil.example/a.png"), attachment(other_port)])
            finally:
                await f.aclose()
            assert got.paths == () and got.failed == (inbound.HOST_REFUSED, inbound.HOST_REFUSED)
            assert server.hits == Counter()

    run(body())


@pytest.mark.parametrize(
    ("name", "declared", "code"),
    [
        ("declared-big.png", {}, inbound.TOO_LARGE),
        ("streamed-big.png", {}, inbound.TOO_LARGE),
        ("a.png", {"size": BIG}, inbound.TOO_LARGE),
        ("model-big.png", {}, inbound.TOO_LARGE_FOR_MODEL),
        ("huge.png", {}, inbound.TOO_LARGE_FOR_MODEL),
        ("headless.png", {}, inbound.TYPE_REFUSED),
        ("page.html", {}, inbound.TYPE_REFUSED),
        ("liar.png", {}, inbound.TYPE_REFUSED),
        ("a.png", {"content_type": "image/svg+xml"}, inbound.TYPE_REFUSED),
        ("redirect.png", {}, inbound.FETCH_FAILED),
        ("missing.png", {}, inbound.FETCH_FAILED),
    ],
)
def test_bad_images_cost_only_the_picture(tmp_path: Path, name: str, declared: dict[str, Any], code: str) -> None:
    """Oversize (declared, Content-Length, streamed, or past what the model accepts in bytes or pixels),
    non-image, mislabelled, truncated, redirected or missing: a code, no file."""

    async def body() -> None:
        async with image_server() as server:
            f = fetcher(tmp_path, server)
            try:
                got = await f.fetch_all([attachment(server.url(name), **declared)])
            finally:
                await f.aclose()
            assert got.paths == () and got.failed == (code,)
            assert not any((tmp_path / "inbound").glob("*.png"))
            if declared:  # refused from the attachment record alone
                assert server.hits[name] == 0
            if name == "redirect.png":
                assert server.hits["a.png"] == 0

    run(body())


def test_a_stalled_download_times_out(tmp_path: Path) -> None:
    """A host that stops sending hits the per-fetch deadline and the picture is dropped."""

    async def body() -> None:
        async with image_server() as server:
            f = fetcher(tmp_path, server, deadline=0.2)
            try:
                got = await f.fetch_all([attachment(server.url("slow.png"))])
            finally:
                await f.aclose()
            assert got.failed == (inbound.TIMEOUT,)

    run(body())


def test_at_most_four_images_per_message(tmp_path: Path) -> None:
    """A message with six images has four fetched and two reported as over the limit."""

    async def body() -> None:
        async with image_server() as server:
            f = fetcher(tmp_path, server)
            try:
                got = await f.fetch_all([attachment(server.url("a.png")) for _ in range(6)])
            finally:
                await f.aclose()
            assert len(got.paths) == 4 and got.failed == (inbound.OVER_LIMIT, inbound.OVER_LIMIT)
            assert server.hits["a.png"] == 4

    run(body())


def test_images_unused_for_a_day_are_pruned(tmp_path: Path) -> None:
    """A stored image last used more than a day ago is removed; a recent one stays."""
    clock = FakeClock()
    f = ImageFetcher(tmp_path / "inbound", FetchPolicy.for_api_base(None), clock)
    old, fresh = f._store(PNG, "png"), f._store(png_bytes((1, 2, 3)), "png")
    stale = clock.wall() - inbound.RETAIN_SECONDS - 60
    os.utime(old, (stale, stale))
    assert f.prune() == 1
    assert not old.exists() and fresh.exists()


def test_the_operator_sets_how_long_fetched_images_are_kept(tmp_path: Path) -> None:
    """At the bound: an image one second past a one-hour retention goes, one a second inside it stays."""
    clock = FakeClock()
    f = ImageFetcher(tmp_path / "inbound", FetchPolicy.for_api_base(None), clock, retain_seconds=3600.0)
    past, inside = f._store(PNG, "png"), f._store(png_bytes((1, 2, 3)), "png")
    os.utime(past, (clock.wall() - 3601, clock.wall() - 3601))
    os.utime(inside, (clock.wall() - 3599, clock.wall() - 3599))
    assert f.prune() == 1
    assert not past.exists() and inside.exists()


# ---------------------------------------------------------------------- through the service


def image_msg(message_id: str, text: str, urls: list[str]) -> TurnSubmit:
    return TurnSubmit(
        delivery_id=message_id,
        room=Room(guild_id="1", channel_id="2"),
        trigger=Trigger(
            message_id=message_id,
            author=Author(id="42", name="ana"),
            text=text,
            attachments=tuple(attachment(u, content_type="image/png") for u in urls),
            at=1_800_000_000.0,
        ),
    )


def test_the_owners_image_reaches_the_model(env: dict[str, str]) -> None:
    """A message with a picture starts a run whose model request carries the picture as an image block."""

    async def body() -> None:
        async with image_server() as server, FakeAnthropic() as fake, service(env, fake, discord_api_base=server.base + "/api/v10") as app:
            fake.script(fa.text("nice red square"))
            bridge = FakeBridge()
            await bridge.connect(app)
            result = await bridge.submit(image_msg("m1", "what is this", [server.url("a.png")]))
            assert result.outcome == "settled" and result.text == "nice red square"
            (block,) = image_blocks(fake.requests[0])
            assert block["source"] == {"type": "base64", "media_type": "image/png", "data": base64.b64encode(PNG).decode()}
            assert any("1 image attached" in t for t in user_texts(fake.requests[0]))

    run(body())


def test_a_steered_messages_image_reaches_the_merged_run(env: dict[str, str]) -> None:
    """A picture sent while the room's run is live is steered in with its message and the merged call sees it."""

    async def body() -> None:
        async with image_server() as server, FakeAnthropic() as fake, service(env, fake, discord_api_base=server.base + "/api/v10") as app:
            gate = asyncio.Event()
            fake.script(fa.text("hm, first thoughts", stall_after=3, stall_until=gate), fa.text("green, got it"))
            bridge = FakeBridge()
            await bridge.connect(app)
            t1 = bridge.start(msg("m1", "clankie look at this"))
            await fake.wait_for_requests(1)
            t2 = bridge.start(image_msg("m2", "this one", [server.url("b.png")]))
            await until(lambda: len(app.captain.lanes["discord:clankie:discord:1:2"].machine.steerers) == 1)
            gate.set()
            r1, r2 = await asyncio.gather(t1, t2)
            assert (r1.outcome, r1.text, r2.outcome) == ("settled", "green, got it", "absorbed")
            assert image_blocks(fake.requests[0]) == []
            (block,) = image_blocks(fake.requests[1])
            assert base64.b64decode(block["source"]["data"]) == png_bytes((10, 200, 10))

    run(body())


def test_past_the_steering_queues_picture_bound_a_steered_message_keeps_its_words_not_its_pictures(env: dict[str, str]) -> None:
    """At the bound (CLANKIE_STEER_MAX_IMAGES=1): the first steered picture waits in the queue, the second
    message is steered with its words only, and the prompt says why its picture was not shown."""

    async def body() -> None:
        async with (
            image_server() as server,
            FakeAnthropic() as fake,
            service(env, fake, discord_api_base=server.base + "/api/v10", steer_max_images=1) as app,
        ):
            gate = asyncio.Event()
            fake.script(fa.text("hm", stall_after=3, stall_until=gate), fa.text("two pictures, one seen"))
            bridge = FakeBridge()
            await bridge.connect(app)
            t1 = bridge.start(msg("m1", "clankie look at these"))
            await fake.wait_for_requests(1)
            t2 = bridge.start(image_msg("m2", "the green one", [server.url("b.png")]))
            await until(lambda: len(app.captain.lanes["discord:clankie:discord:1:2"].machine.steerers) == 1)
            t3 = bridge.start(image_msg("m3", "and the red one", [server.url("a.png")]))
            await until(lambda: len(app.captain.lanes["discord:clankie:discord:1:2"].machine.steerers) == 2)
            gate.set()
            results = await asyncio.gather(t1, t2, t3)
            assert [r.outcome for r in results] == ["settled", "absorbed", "absorbed"]
            (block,) = image_blocks(fake.requests[1])
            assert base64.b64decode(block["source"]["data"]) == png_bytes((10, 200, 10))
            text = "\n".join(user_texts(fake.requests[1]))
            assert "and the red one" in text and "too many pictures arrived while you were answering" in text

    run(body())


def test_a_failed_fetch_still_settles_and_says_the_image_could_not_load(env: dict[str, str]) -> None:
    """An image that cannot be fetched costs the picture only: the turn settles and the prompt says so."""

    async def body() -> None:
        async with image_server() as server, FakeAnthropic() as fake, service(env, fake, discord_api_base=server.base + "/api/v10") as app:
            fake.script(fa.text("I can't see the picture, but sure"))
            bridge = FakeBridge()
            await bridge.connect(app)
            urls = [server.url("missing.png"), "https://evil.example/x.png"]
            result = await bridge.submit(image_msg("m1", "look", urls))
            assert result.outcome == "settled"
            assert image_blocks(fake.requests[0]) == []
            prompt_text = "\n".join(user_texts(fake.requests[0]))
            assert "2 attached images were not shown to you: could not be loaded" in prompt_text
            assert "download failed" in prompt_text and "not on Discord's image host" in prompt_text

    run(body())


def backlog_entry(message_id: str, text: str, urls: list[str], at: float) -> HistoryMessage:
    return HistoryMessage(
        id=message_id, author_id="43", author_name="bo", text=text, at=at,
        attachments=tuple(attachment(u, content_type="image/png") for u in urls),
    )


def catch_up(trigger_urls: list[str], backlog: list[HistoryMessage]) -> TurnSubmit:
    submit = image_msg("m9", "anyway, thoughts?", trigger_urls)
    return submit.model_copy(
        update={"trigger": submit.trigger.model_copy(update={"unprompted": True}), "backlog": tuple(backlog)}
    )


def test_a_catch_up_backlogs_image_reaches_the_model_but_cold_historys_is_not_fetched(env: dict[str, str]) -> None:
    """A caption-less picture buffered before the newest message is shown to the model with the catch-up turn,
    while a picture that only appears in the cold lane's history is named but never fetched."""

    async def body() -> None:
        async with image_server() as server, FakeAnthropic() as fake, service(env, fake, discord_api_base=server.base + "/api/v10") as app:
            fake.script(fa.text("what a chart"))
            pic = backlog_entry("b1", "", [server.url("b.png")], 1_799_999_900.0)
            old = backlog_entry("h0", "an older picture", [server.url("a.png")], 1_799_999_000.0)
            bridge = FakeBridge(history=[old, pic])  # a cold lane reads the room: the backlog is in it too
            await bridge.connect(app)
            result = await bridge.submit(catch_up([], [pic]))
            assert result.outcome == "settled"
            (block,) = image_blocks(fake.requests[0])
            assert base64.b64decode(block["source"]["data"]) == png_bytes((10, 200, 10))
            assert server.hits["a.png"] == 0  # history is context, not something said to him now
            text = "\n".join(user_texts(fake.requests[0]))
            assert '<43> "an older picture" (1 image attached, not shown)' in text
            assert '<43> "" (image 1 shown with this message)' in text

    run(body())


def test_backlog_images_are_capped_per_turn_and_the_prompt_says_which_were_not_loaded(env: dict[str, str]) -> None:
    """A catch-up carrying more pictures than a turn allows shows eight (the trigger's, then the newest backlog
    messages'), and the prompt names the ones left out or failed next to their messages."""

    async def body() -> None:
        async with image_server() as server, FakeAnthropic() as fake, service(env, fake, discord_api_base=server.base + "/api/v10") as app:
            fake.script(fa.text("lots of pictures"))
            a = server.url("a.png")
            backlog = [
                backlog_entry("b1", "oldest", [a, a], 1_799_999_100.0),
                backlog_entry("b2", "middle", [a, server.url("missing.png")], 1_799_999_200.0),
                backlog_entry("b3", "newest", [a, a], 1_799_999_300.0),
            ]
            bridge = FakeBridge(history=[])  # a warm read: the catch-up's own backlog is the context
            await bridge.connect(app)
            result = await bridge.submit(catch_up([a, a, a, a], backlog))
            assert result.outcome == "settled"
            assert len(image_blocks(fake.requests[0])) == 7  # 4 + 2 + 1: the oldest message's two are over the cap
            assert server.hits["a.png"] == 7 and server.hits["missing.png"] == 1
            text = "\n".join(user_texts(fake.requests[0]))
            assert "(4 images attached, shown with this message as images 1–4)" in text
            assert '<43> "newest" (images 6–7 shown with this message)' in text
            assert '<43> "middle" (image 5 shown with this message) (1 attached image was not shown to you: ' \
                "could not be loaded — download failed)" in text
            assert '<43> "oldest" (2 attached images were not shown to you: could not be loaded — ' \
                f"more than {inbound.MAX_TURN_IMAGES} images in one turn)" in text

    run(body())
