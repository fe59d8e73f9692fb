"""Demo mode (`scripts/run --demo`): the built-in offline model answers locally and drives the real tools through
the real hosts (screenshot, diagrams, a long task's text update and card); a real key refuses it."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from clankie.protocol import SayRequest, TurnResult
from clankie.testing.fake_discord import Post, narrate
from service.agent.demo import DEMO_HOST, DEMO_MARK, DEMO_REPLY, NO_ROOM, TEXT_UPDATE
from supervisor import ctl
from tests.integration.tree import CHAN, PERSON, Tree, real_tree
from tests.polling import until
from tests.supervisor.harness import supervisor

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

REPO = Path(__file__).resolve().parents[2]


def test_the_demo_tree_answers_say_and_never_uses_the_discord_token(
    tmp_path: Path, runtime_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With CLANKIE_DEMO=1 and no key, `say lobby hi` is answered as a demo, and a token in the environment is ignored."""
    env = {"CLANKIE_DEMO": "1", "DISCORD_TOKEN": "would-be-real-token",
           "CLANKIE_HEARTBEAT_SECONDS": "2", "CLANKIE_STALL_TICK_SECONDS": "1", "CLANKIE_HEARTBEAT_TIMEOUT_SECONDS": "20"}
    with supervisor(tmp_path, runtime_dir, None, env=env, ready_timeout=60) as sup:
        sock = ["--socket", str(sup.sock)]
        assert ctl.main([*sock, "say", "lobby", "hi", "--json"]) == 0
        said = json.loads(capsys.readouterr().out)
        assert said["outcome"] == "settled" and said["text"] == DEMO_REPLY and "demo" in said["text"]
        (bridge,) = [c for c in sup.status().children if c.name == "bridge"]
        assert "disabled (no token)" in bridge.detail


def test_scripts_run_demo_refuses_a_real_key_with_one_line(tmp_path: Path) -> None:
    """`./scripts/run --demo` with ANTHROPIC_API_KEY set exits 78 and says why on one line, starting nothing."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "CLANKIE_STATE": str(tmp_path / "state"),
           "CLANKIE_RUNTIME_DIR": str(tmp_path / "run"), "ANTHROPIC_API_KEY": "sk-ant-a-real-looking-key"}
    done = subprocess.run([str(REPO / "scripts/run"), "--demo"], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 78
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "demo mode refuses" in lines[0] and "ANTHROPIC_API_KEY" in lines[0]
    assert "sk-ant" not in done.stderr + done.stdout
    assert not (tmp_path / "run" / "control.sock").exists()


WRITTEN = re.compile(r"\(written to (/[^)\s]+)\)")
PNG = b"\x89PNG\r\n\x1a\n"


def host_wrote(text: str, root: Path, sub: str) -> tuple[Path, bytes]:
    """The one picture a demo reply names: a file under ``root/sub`` whose name is its bytes' sha256."""
    (named,) = WRITTEN.findall(text)
    path = Path(named)
    assert path.parent == root / sub and path.suffix == ".png", path
    data = path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == path.stem
    return path, data


def assert_picture(post: Post, root: Path, sub: str) -> Image.Image:
    """The reply says it is a demo and carries exactly the PNG the host wrote (same bytes, so same size and hash),
    which decodes to a whole image."""
    assert DEMO_MARK in post.content and "did not work out" not in post.content, post.content
    path, data = host_wrote(post.content, root, sub)
    ((_name, sent),) = post.files
    assert sent.startswith(PNG) and len(sent) == len(data) == path.stat().st_size
    assert hashlib.sha256(sent).hexdigest() == path.stem
    image = Image.open(io.BytesIO(sent))
    image.load()  # decodes every row: a truncated or corrupt PNG raises here
    assert image.format == "PNG" and image.width > 100 and image.height > 100
    return image


def threaded_to(t: Tree, trigger: str) -> list[Post]:
    return [p for p in t.discord.posts if p.message_reference and str(p.message_reference.get("message_id")) == trigger]


@pytest.mark.timeout(180)
def test_the_demo_shows_a_screenshot_diagrams_and_a_long_task_through_the_real_hosts(
    tmp_path: Path, runtime_dir: Path
) -> None:
    """In demo mode, against a loopback Discord stand-in: a screenshot of the demo page and both diagrams arrive
    attached, the very bytes the hosts wrote; a long task posts its text update, then the tool card (removed at the
    end), then the reply with its picture; `say` gets a picture too; every reply says it is a demo; no key is used."""

    async def main() -> None:
        env = {"CLANKIE_DEMO": "1", "ANTHROPIC_API_KEY": ""}  # the tree's fake key would refuse demo mode
        async with real_tree(tmp_path, runtime_dir, env, spares=False) as t:
            root = t.state / "attachments"
            told: list[str] = []  # what `python -m clankie.testing.fake_discord` prints for a demo's watcher
            watch = asyncio.ensure_future(narrate(t.discord, told.append))
            shot = assert_picture(await t.ask("clankie, take a screenshot please"), root, "browser")
            assert shot.size == (1280, 800)
            assert shot.convert("RGB").getpixel((5, 5)) == (0x0F, 0x27, 0x42)  # the demo page's own background
            assert_picture(await t.ask("clankie, draw me a diagram"), root, "tldraw")
            assert_picture(await t.ask("clankie, a sequence diagram of the flow?"), root, "tldraw")

            sent = await t.discord.message(CHAN, "clankie, run a long task", author_id=PERSON)
            reply = await t.reply_to(sent["id"])
            assert_picture(reply, root, "browser")
            posts = threaded_to(t, sent["id"])
            (update,) = [p for p in posts if p.content == TEXT_UPDATE]
            (card,) = [p for p in posts if p.content == f"Taking a screenshot of {DEMO_HOST}\u2026"]
            assert posts.index(update) < posts.index(card) < posts.index(reply)
            await until(lambda: card.id in t.discord.deleted, 30, "the card removed when the turn ended")
            assert DEMO_MARK in update.content and "text update" in reply.content

            # the card goes before the reply is posted (bridge/turn.py), so each line is waited for: the watcher tells a
            # change on its next turn of the loop, which can come after reply_to has seen the post
            await until(lambda: f"<- message {card.id} deleted" in told, 10, "the watcher telling of the card's end")
            await until(lambda: any(line.startswith(f"<- #{CHAN} message {reply.id}: ") and "[file " in line
                                    for line in told), 10, "the watcher telling of the reply and its picture")
            assert f"<- #{CHAN} message {update.id}: {TEXT_UPDATE}" in told
            watch.cancel()

            for ask, sub in (("a screenshot, please", "browser"), ("a long task", "browser"), ("draw it", "tldraw")):
                said = await t.call("say", SayRequest(room="lobby", text=ask), timeout=90)
                assert isinstance(said, TurnResult) and said.outcome == "settled" and DEMO_MARK in said.text
                path, data = host_wrote(said.text, root, sub)
                assert said.media == (f"sha256:{path.stem}:{sub}/{path.name}",)
                Image.open(io.BytesIO(data)).load()
                assert (NO_ROOM in said.text) == (ask == "a long task")  # `say` has no Discord room to post in
            assert t.anthropic.requests == []  # the fake Anthropic was never asked: the demo model is offline

    asyncio.run(main())
