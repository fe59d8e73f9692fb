"""Pictures across the whole tree: host writes, bridge reads, Discord gets words and picture in one message.

Each test boots the real tree once (`clankie run`: browser, tldraw, service,
bridge) against the loopback fake Discord and fake Anthropic, and plays
several turns in one room. The fake model is scripted to call the tools.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from bridge.chunks import PICTURE_NOTE
from clankie.artifacts import parse_ref
from clankie.protocol import ChildTarget
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_discord import Post
from hosts.tldraw.examples import er_example, sequence_example
from tests.integration.tree import CHAN, PERSON, Tree, real_tree
from tests.polling import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

PNG = b"\x89PNG\r\n\x1a\n"
# NO_CARD: these tests are about pictures, not the tool-activity card (tests/bridge/test_e2e_room.py is): they turn
# cards off by their setting. A reply is still found by its delivery's receipt (Tree.reply_to), card or no card.


def artifact_path(root: Path, ref: str) -> Path:
    digest, sub, ext = parse_ref(ref)
    return root / sub / f"{digest}.{ext}"


def assert_attached(post: Post, ref: str, root: Path, words: str) -> None:
    """One message: the words, and exactly one file whose bytes hash to the ref and match the file under root."""
    assert post.content == words
    assert len(post.files) == 1, post.files
    _name, data = post.files[0]
    digest, _sub, _ext = parse_ref(ref)
    assert data.startswith(PNG)
    assert hashlib.sha256(data).hexdigest() == digest
    assert artifact_path(root, ref).read_bytes() == data


def assert_words_with_note(post: Post, words: str) -> None:
    assert post.files == []
    assert post.content == f"{words}\n\n{PICTURE_NOTE}"


async def tool_turn(t: Tree, tool: str, args: dict[str, object], words: str, ask: str) -> tuple[Post, str]:
    """One turn in which the model calls ``tool`` once and then answers ``words``; returns (reply, tool result text)."""
    n = len(t.anthropic.requests)
    t.anthropic.script(fa.tool_use((tool, args)), fa.text(words))
    post = await t.ask(ask)
    return post, t.tool_results(n + 1)


async def held_turn(
    t: Tree, root: Path, tool: str, args: dict[str, object], words: str, mutate: Callable[[Path], None]
) -> Post:
    """The model calls ``tool``; its answer is held while ``mutate(path_of_the_artifact)`` runs; then it answers."""
    gate = asyncio.Event()
    n = len(t.anthropic.requests)
    t.anthropic.script(fa.tool_use((tool, args)), fa.text(words, stall_after=1, stall_until=gate))
    sent = await t.discord.message(CHAN, "clankie, draw it please", author_id=PERSON)
    await asyncio.wait_for(t.anthropic.wait_for_requests(n + 2), 45)
    path = artifact_path(root, t.last_ref(n + 1))
    assert path.is_file()
    mutate(path)
    gate.set()
    return await t.reply_to(sent["id"])


def delete(path: Path) -> None:
    path.unlink()


def tamper(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def symlink_outside(path: Path) -> None:
    """Same bytes (the hash would match), but the file now lives outside the root."""
    outside = path.parents[2] / f"outside-{path.name}"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)


def bridge_log(t: Tree) -> str:
    return (t.state / "logs" / "bridge.log").read_text(errors="replace")


def test_default_root_pictures_arrive_attached_and_every_broken_file_costs_only_the_picture(
    tmp_path: Path, runtime_dir: Path
) -> None:
    """No attachment-root variable: screenshot and both diagrams arrive attached; deleted, tampered or escaping files
    give the words with the note; the metadata address is refused and he says so."""

    async def main() -> None:
        env = {"CLANKIE_BROWSER_ALLOW_PRIVATE": "true", "CLANKIE_DISCORD_TOOL_CARD": "false"}  # NO_CARD below
        async with real_tree(tmp_path, runtime_dir, env, spares=False) as t:  # no child restarts
            root = t.state / "attachments"
            assert "CLANKIE_DISCORD_ATTACHMENT_ROOT" not in t.env
            status = await t.status()
            assert {c.name: c.attachment_root for c in status.children} == dict.fromkeys(
                ("browser", "tldraw", "service", "bridge"), str(root)
            )
            doctor = await t.doctor()
            assert doctor.ok and [(c.writer, c.ok) for c in doctor.checks] == [("browser", True), ("tldraw", True)]

            post, said = await tool_turn(t, "browser_screenshot", {"url": t.site.url("/")}, "Here is your page.",
                                         "clankie, screenshot my test page")
            assert_attached(post, t.last_ref(len(t.anthropic.requests) - 1), root, "Here is your page.")
            assert "Screenshot ready" in said and "/" in t.site.hits

            post, _ = await tool_turn(t, "draw_er_diagram", er_example(3), "The schema.", "clankie, draw the schema")
            assert_attached(post, t.last_ref(len(t.anthropic.requests) - 1), root, "The schema.")
            post, _ = await tool_turn(t, "draw_sequence_diagram", sequence_example(), "The checkout flow.",
                                      "clankie, draw the checkout flow")
            assert_attached(post, t.last_ref(len(t.anthropic.requests) - 1), root, "The checkout flow.")

            for k, mutate in ((4, delete), (5, tamper), (6, symlink_outside)):
                words = f"Diagram {k} coming up."
                post = await held_turn(t, root, "draw_er_diagram", er_example(k), words, mutate)
                assert_words_with_note(post, words)
            await until(lambda: all(code in bridge_log(t) for code in
                                    ("artifact_missing", "artifact_hash_mismatch", "artifact_outside_root")),
                        10, "the bridge logging each refusal code")

            post, said = await tool_turn(t, "browser_screenshot", {"url": "http://169.254.169.254/latest/meta-data/"},
                                         "I can't open that address.", "clankie, screenshot the metadata service")
            assert "browser_url_refused" in said
            assert post.content == "I can't open that address." and post.files == []

    asyncio.run(main())


def test_custom_root_policy_limit_host_death_and_restarts(tmp_path: Path, runtime_dir: Path) -> None:
    """CLANKIE_DISCORD_ATTACHMENT_ROOT set: pictures arrive from that root; 127.0.0.1 is refused by default; a picture
    over the upload limit costs only the picture; a browser host killed mid-request still leaves words; restarted
    hosts keep serving."""
    pictures = tmp_path / "pictures"

    async def main() -> None:
        env = {
            "CLANKIE_DISCORD_ATTACHMENT_ROOT": str(pictures),
            "CLANKIE_BROWSER_PINNED_HOSTS": "allowed.test=127.0.0.1",  # the test page, with the default policy on
            "CLANKIE_DISCORD_UPLOAD_LIMIT_BYTES": "100000",
            "CLANKIE_DISCORD_TOOL_CARD": "false",  # NO_CARD below
        }
        async with real_tree(tmp_path, runtime_dir, env, spares={"browser", "tldraw"}) as t:  # the two it restarts
            status = await t.status()
            assert {c.attachment_root for c in status.children} == {str(pictures)}
            assert (await t.doctor()).ok

            post, _ = await tool_turn(t, "browser_screenshot", {"url": t.site.url("/", "allowed.test")},
                                      "Your page.", "clankie, screenshot allowed.test")
            ref = t.last_ref(len(t.anthropic.requests) - 1)
            assert_attached(post, ref, pictures, "Your page.")
            assert not (t.state / "attachments" / "browser").exists()

            hits = len(t.site.hits)
            post, said = await tool_turn(t, "browser_screenshot", {"url": t.site.url("/")},
                                         "That address is off limits for me.", "clankie, screenshot 127.0.0.1")
            assert "browser_url_refused" in said and len(t.site.hits) == hits
            assert post.content == "That address is off limits for me." and post.files == []

            post, _ = await tool_turn(t, "draw_er_diagram", er_example(20), "A big schema.", "clankie, draw it all")
            big = artifact_path(pictures, t.last_ref(len(t.anthropic.requests) - 1))
            assert big.stat().st_size > 100_000
            assert_words_with_note(post, "A big schema.")
            await until(lambda: "artifact_too_large" in bridge_log(t), 10, "the bridge logging artifact_too_large")

            # The browser host dies while a page is loading: the turn still settles with words.
            old = await t.child("browser")
            assert old.pid is not None
            n = len(t.anthropic.requests)
            t.anthropic.script(fa.tool_use(("browser_screenshot", {"url": t.site.url("/slow", "allowed.test")})),
                               fa.text("The browser fell over; ask me again in a moment."))
            sent = await t.discord.message(CHAN, "clankie, screenshot the slow page", author_id=PERSON)
            await until(lambda: "/slow" in t.site.hits, 30, "the slow page being requested")
            os.kill(old.pid, signal.SIGKILL)
            post = await t.reply_to(sent["id"])
            assert post.content == "The browser fell over; ask me again in a moment." and post.files == []
            assert "browser_unavailable" in t.tool_results(n + 1)

            new = await t.wait_child(lambda c: c.state == "running" and c.pid not in (None, old.pid), "browser")
            assert new.restarts > old.restarts and new.attachment_root == str(pictures)
            post, _ = await tool_turn(t, "browser_screenshot", {"url": t.site.url("/", "allowed.test")},
                                      "Back up: your page.", "clankie, try again")
            assert_attached(post, t.last_ref(len(t.anthropic.requests) - 1), pictures, "Back up: your page.")

            tl = await t.child("tldraw")
            await t.call("restart", ChildTarget(name="tldraw"))
            await t.wait_child(lambda c: c.state == "running" and c.pid not in (None, tl.pid), "tldraw")
            post, _ = await tool_turn(t, "draw_sequence_diagram", sequence_example(), "After the restart.",
                                      "clankie, draw the flow again")
            assert_attached(post, t.last_ref(len(t.anthropic.requests) - 1), pictures, "After the restart.")
            assert (await t.doctor()).ok

    asyncio.run(main())
