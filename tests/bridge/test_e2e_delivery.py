"""Replies as a Discord user sees them: threaded, whole, never pinging, pictures or an honest note."""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from bridge import delivery
from bridge.chunks import PICTURE_NOTE
from bridge.delivery import nonce_for
from clankie import ipc
from clankie.artifacts import Resolved, resolve_artifact, write_artifact
from clankie.protocol import TurnResult, TurnSubmit
from tests.bridge.harness import CHAN, CHAN2, GUILD, PERSON, Harness, running

MSGS = "POST /channels/{id}/messages"


def reply_with(text: str, media: tuple[str, ...] = ()) -> Callable[[ipc.Connection, TurnSubmit], Awaitable[TurnResult]]:
    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        return TurnResult.settled(text, media, turn_id="turn-1-" + sub.delivery_id)

    return script


def test_reply_is_threaded_and_pings_nobody(env: dict[str, str]) -> None:
    """A reply quoting @everyone is threaded to the trigger and its mentions ping nobody."""

    async def main() -> None:
        async with running(env, script=reply_with("@everyone look, <@123> said hi")) as h:
            m = await h.fake.message(CHAN, "what's up @everyone", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(m["id"]))
            [post] = h.fake.posts
            assert post.content == "@everyone look, <@123> said hi"
            assert post.allowed_mentions == {"parse": []}
            assert post.message_reference is not None
            assert str(post.message_reference["message_id"]) == m["id"]
            assert post.message_reference["fail_if_not_exists"] is False
            assert post.nonce == nonce_for(m["id"], "reply", 0)
            [sub] = h.service.submits
            assert sub.delivery_id == m["id"] and sub.room.guild_id == GUILD and sub.room.channel_id == CHAN
            assert sub.trigger.text == "what's up @everyone" and sub.trigger.unprompted is True
            assert h.outcomes(m["id"]) == ["accepted", "settled"]
            settled = next(r for r in h.receipts() if r["outcome"] == "settled")
            assert settled["message_ids"] == [post.id] and settled["turn_id"] == "turn-1-" + m["id"]
            raw = (h.state_dir / "receipts" / "bridge.jsonl").read_text()
            assert "everyone" not in raw and "said hi" not in raw

    asyncio.run(main())


def test_long_reply_arrives_whole_in_discord_sized_messages(env: dict[str, str]) -> None:
    """A 5,000-character reply arrives complete in messages of at most 2,000 characters, threaded once."""
    text = "\n".join(f"{i:03d} " + "all work and no play " * 3 for i in range(75))
    assert len(text) >= 5000

    async def main() -> None:
        async with running(env, script=reply_with(text)) as h:
            m = await h.fake.message(CHAN, "tell me everything", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(m["id"]))
            posts = h.fake.posts
            assert len(posts) == 3
            assert all(len(p.content) <= 2000 for p in posts)
            assert "".join(p.content for p in posts) == text.strip()  # the reply is trimmed, nothing else changes
            assert posts[0].message_reference is not None
            assert [p.message_reference for p in posts[1:]] == [None, None]
            assert len({p.nonce for p in posts}) == 3
            assert all(p.allowed_mentions == {"parse": []} for p in posts)
            assert next(r for r in h.receipts() if r["outcome"] == "settled")["message_ids"] == [p.id for p in posts]

    asyncio.run(main())


def test_burst_of_three_gets_one_reply_threaded_to_the_first(env: dict[str, str]) -> None:
    """Three quick messages: the run owner's reply answers all three; the absorbed two post nothing."""
    h: Harness  # bound by main(); the script it runs reads it
    first_id: list[str] = []
    all_in = asyncio.Event()

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        if not first_id:
            first_id.append(sub.delivery_id)
            await all_in.wait()
            return TurnResult.settled("one answer for all of that", turn_id="turn-1")
        if len(h.service.submits) == 3:
            all_in.set()
        return TurnResult.absorbed(turn_id="turn-1")

    async def main() -> None:
        nonlocal h
        async with running(env, script=script) as h:
            ids = [(await h.fake.message(CHAN, t, author_id=PERSON))["id"] for t in ("why", "it's rude", "anyway")]
            await h.until(lambda: all(len(h.outcomes(i)) == 2 for i in ids))
            assert [h.outcomes(i)[1] for i in ids] == ["settled", "absorbed", "absorbed"]
            [post] = h.fake.posts
            assert str(post.message_reference["message_id"]) == ids[0]  # type: ignore[index]  # a reply always carries its reference

    asyncio.run(main())


def _artifact_cases(root: Path, outside: Path) -> dict[str, str]:
    good = write_artifact(root, "browser", b"\x89PNG good picture", "png")
    missing = "sha256:" + "ab" * 32 + ":browser/" + "ab" * 32 + ".png"
    tampered = write_artifact(root, "tldraw", b"original diagram", "png")
    digest = tampered.split(":")[1]
    (root / "tldraw" / f"{digest}.png").write_bytes(b"swapped diagram!")
    secret = b"a file outside the root"
    sdigest = hashlib.sha256(secret).hexdigest()
    (outside / "secret.png").write_bytes(secret)
    (root / "browser" / f"{sdigest}.png").symlink_to(outside / "secret.png")
    symlinked = f"sha256:{sdigest}:browser/{sdigest}.png"
    oversized = write_artifact(root, "browser", os.urandom(5000), "png")
    return {"good": good, "missing": missing, "tampered": tampered, "symlinked": symlinked, "oversized": oversized}


def test_pictures_ride_with_the_words_or_the_words_go_alone_with_a_note(env: dict[str, str], tmp_path: Path) -> None:
    """A good picture is attached; a missing, tampered, symlinked-out or oversized one costs only the picture."""
    outside = tmp_path / "outside"
    outside.mkdir()
    root = Path(env["CLANKIE_STATE"]) / "attachments"
    refs = _artifact_cases(root, outside)
    by_text = {f"show {k}": v for k, v in refs.items()}

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        return TurnResult.settled(f"here it is: {sub.trigger.text}", (by_text[sub.trigger.text],), turn_id="t")

    async def main() -> None:
        async with running(env, script=script, overrides={"CLANKIE_DISCORD_UPLOAD_LIMIT_BYTES": "4096"}) as h:
            ids = {k: (await h.fake.message(CHAN, f"show {k}", author_id=PERSON))["id"] for k in refs}
            await h.until(lambda: len(h.fake.posts) == 5)
            posts = {str(p.message_reference["message_id"]): p for p in h.fake.posts}  # type: ignore[index]  # a reply always carries its reference
            good = posts[ids["good"]]
            assert good.content == "here it is: show good" and len(good.files) == 1
            assert good.files[0][1] == b"\x89PNG good picture"
            for case in ("missing", "tampered", "symlinked", "oversized"):
                p = posts[ids[case]]
                assert p.files == [], case
                assert p.content == f"here it is: show {case}\n\n{PICTURE_NOTE}", case
            assert all(b"outside the root" not in d for p in h.fake.posts for _, d in p.files)

    asyncio.run(main())


def test_picture_refused_by_discord_still_posts_the_words(env: dict[str, str]) -> None:
    """If Discord refuses the message carrying the picture, the words follow alone with the note."""
    root = Path(env["CLANKIE_STATE"]) / "attachments"
    ref = write_artifact(root, "browser", b"picture", "png")

    async def main() -> None:
        async with running(env, script=reply_with("words matter", (ref,))) as h:
            h.fake.fail(MSGS, 400)
            m = await h.fake.message(CHAN, "show me", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(m["id"]))
            [post] = h.fake.posts
            assert post.content == f"words matter\n\n{PICTURE_NOTE}" and post.files == []
            assert str(post.message_reference["message_id"]) == m["id"]  # type: ignore[index]  # a reply always carries its reference

    asyncio.run(main())


def test_rate_limit_delays_but_does_not_lose_the_reply(env: dict[str, str]) -> None:
    """A 429 (with Discord's Via header) delays the reply by retry_after; it still arrives once."""

    async def main() -> None:
        async with running(env, script=reply_with("patience")) as h:
            h.fake.fail(MSGS, 429, retry_after=0.3)
            m = await h.fake.message(CHAN, "hello", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(m["id"]))
            calls = [c for c in h.fake.calls if c.route == MSGS]
            assert [c.status for c in calls] == [429, 200]
            assert calls[1].at - calls[0].at >= 0.3
            assert [p.content for p in h.fake.posts] == ["patience"]

    asyncio.run(main())


def test_503_and_cloudflare_429_are_retried_by_the_bridge_with_one_nonce(env: dict[str, str]) -> None:
    """Faults discord.py does not retry (503, 429 without Via) are retried by the bridge with the same nonce."""

    async def main() -> None:
        async with running(env, script=reply_with("still here")) as h:
            h.fake.fail(MSGS, 503, 503)
            h.fake.fail(MSGS, 429, via=False)
            m = await h.fake.message(CHAN, "hello", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(m["id"]))
            calls = [c for c in h.fake.calls if c.route == MSGS]
            assert [c.status for c in calls] == [503, 503, 429, 200]
            assert {c.json["nonce"] for c in calls} == {nonce_for(m["id"], "reply", 0)}
            assert [p.content for p in h.fake.posts] == ["still here"]

    asyncio.run(main())


def test_reply_that_never_gets_through_is_recorded_not_retried_forever(env: dict[str, str]) -> None:
    """When every attempt fails the turn keeps its outcome and a reply_failed receipt says why."""

    async def main() -> None:
        async with running(env, script=reply_with("lost cause")) as h:
            h.fake.fail(MSGS, *([503] * 5))
            m = await h.fake.message(CHAN, "hello", author_id=PERSON)
            await h.until(lambda: "reply_failed" in h.outcomes(m["id"]))
            assert h.outcomes(m["id"]) == ["accepted", "settled", "reply_failed"]
            assert [r.get("reason") for r in h.receipts() if r["outcome"] == "reply_failed"] == ["reply_http_503"]
            assert h.fake.posts == []

    asyncio.run(main())


def test_a_fifo_planted_as_the_picture_costs_only_the_picture(env: dict[str, str]) -> None:
    """A FIFO at the artifact path is refused at once; the words go out with the note and the bridge keeps serving."""
    root = Path(env["CLANKIE_STATE"]) / "attachments"
    ref = write_artifact(root, "browser", b"picture", "png")
    digest = ref.split(":")[1]
    target = root / "browser" / f"{digest}.png"
    target.unlink()
    os.mkfifo(target, 0o600)

    async def main() -> None:
        async with running(env, script=reply_with("look at this", (ref,))) as h:
            m = await h.fake.message(CHAN, "show me", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(m["id"]))
            [post] = h.fake.posts
            assert post.content == f"look at this\n\n{PICTURE_NOTE}" and post.files == []
            assert str(post.message_reference["message_id"]) == m["id"]  # type: ignore[index]  # a reply always carries its reference
            again = await h.fake.message(CHAN, "still there?", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(again["id"]))

    asyncio.run(main())


def test_a_slow_picture_read_does_not_hold_up_other_rooms(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """While one reply's picture is still being read and hashed, a reply in another room goes out."""
    root = Path(env["CLANKIE_STATE"]) / "attachments"
    ref = write_artifact(root, "browser", b"picture", "png")
    reading, release = threading.Event(), threading.Event()
    real = resolve_artifact

    def slow_resolve(root: Path, ref: str, max_bytes: int) -> Resolved:
        reading.set()
        release.wait(10.0)  # bounded: a blocked event loop fails the test instead of hanging it
        return real(root, ref, max_bytes)

    monkeypatch.setattr(delivery, "resolve_artifact", slow_resolve)

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        media = (ref,) if sub.room.channel_id == CHAN else ()
        return TurnResult.settled(f"reply in {sub.room.channel_id}", media, turn_id="t")

    async def main() -> None:
        async with running(env, script=script) as h:
            slow = await h.fake.message(CHAN, "draw it", author_id=PERSON)
            await asyncio.to_thread(reading.wait, 10.0)
            quick = await h.fake.message(CHAN2, "hello", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(quick["id"]))
            assert not release.is_set() and "settled" not in h.outcomes(slow["id"])
            release.set()
            await h.until(lambda: "settled" in h.outcomes(slow["id"]))
            by_chan = {p.channel_id: p for p in h.fake.posts}
            assert by_chan[CHAN].files and by_chan[CHAN].files[0][1] == b"picture"
            assert by_chan[CHAN2].content == f"reply in {CHAN2}"

    try:
        asyncio.run(main())
    finally:
        release.set()
