"""`python -m bridge` as the supervisor runs it: config errors exit 78, no token stays healthy, SIGTERM is clean."""

from __future__ import annotations

import asyncio
import signal
import sys

import pytest

from bridge.app import BridgeApp
from clankie import paths
from clankie.settings import load
from clankie.testing.fake_discord import FakeDiscord
from tests.bridge.harness import CHAN, GUILD, PERSON, FakeService, Harness


async def _bridge_process(env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bridge", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )


def _env(env: dict[str, str], fake: FakeDiscord, token: str) -> dict[str, str]:
    return {**env, "DISCORD_TOKEN": token, "CLANKIE_DISCORD_API_BASE": fake.api_base, "CLANKIE_DISCORD_GUILD_IDS": GUILD,
            "CLANKIE_USER_TURNS_PER_MINUTE": "0", "CLANKIE_ROOM_TURNS_PER_MINUTE": "0"}  # one person, many turns a minute


@pytest.mark.parametrize(
    ("token", "close_code", "words"),
    [("wrong-token", None, "rejected the bot token"), ("fake-token", 4014, "Message Content intent")],
)
def test_configuration_errors_exit_78_with_a_clear_message(
    env: dict[str, str], token: str, close_code: int | None, words: str
) -> None:
    """A rejected token or an ungranted message-content intent stops the bridge with status 78 and says why."""

    async def main() -> None:
        fake = FakeDiscord()
        fake.identify_close_code = close_code
        await fake.start()
        try:
            proc = await _bridge_process(_env(env, fake, token))
            async with asyncio.timeout(30):
                _out, err = await proc.communicate()
            assert proc.returncode == 78
            last = err.decode().strip().splitlines()[-1]
            assert words in last and last.startswith("bridge: ")
            assert token not in err.decode()
        finally:
            await fake.close()

    asyncio.run(main())


def test_bad_setting_exits_78(env: dict[str, str]) -> None:
    """An invalid setting is reported on one line and exits 78 before anything starts."""

    async def main() -> None:
        proc = await _bridge_process({**env, "CLANKIE_DISCORD_DM_POLICY": "everyone"})
        async with asyncio.timeout(30):
            _out, err = await proc.communicate()
        assert proc.returncode == 78
        assert "CLANKIE_DISCORD_DM_POLICY" in err.decode().strip().splitlines()[-1]

    asyncio.run(main())


def test_without_a_token_the_bridge_runs_local_only_and_healthy(env: dict[str, str]) -> None:
    """No token: the bridge says `disabled (no token)` in its heartbeat, keeps running and keeps its service link."""

    async def main() -> None:
        settings = load(env)
        paths.ensure_private_dir(settings.runtime_dir)
        service = FakeService(paths.socket_path(settings.runtime_dir, "service"))
        await service.start()
        app = BridgeApp(settings)
        task = asyncio.create_task(app.run())
        try:
            await app.ready.wait()
            fake = FakeDiscord()  # only for its wait helper; never contacted
            h = Harness(fake, service, app, settings.state_dir)
            await h.until(lambda: app.bridge.link.status == "connected")
            beat = app.heartbeat()
            assert beat.detail == "discord: disabled (no token); service: connected"
            assert beat.report["discord"] == "disabled (no token)"
            assert not task.done()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await service.close()

    asyncio.run(main())


def test_real_process_answers_and_stops_cleanly_on_sigterm(env: dict[str, str]) -> None:
    """The real `python -m bridge` process answers a message through the service and exits 0 on SIGTERM."""

    async def main() -> None:
        fake = FakeDiscord()
        await fake.start()
        settings = load(env)
        paths.ensure_private_dir(settings.runtime_dir)
        service = FakeService(paths.socket_path(settings.runtime_dir, "service"))
        await service.start()
        proc = await _bridge_process(_env(env, fake, fake.token))
        try:
            await fake.wait_for(lambda: fake.readies == 1, timeout=20)
            m = await fake.message(CHAN, "ping", author_id=PERSON)
            await fake.wait_for(lambda: bool(fake.posts), timeout=20)
            [post] = fake.posts
            assert str(post.message_reference["message_id"]) == m["id"]  # type: ignore[index]  # a reply always carries its reference
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(20):
                await proc.wait()
            assert proc.returncode == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await service.close()
            await fake.close()

    asyncio.run(main())


def test_token_revoked_mid_session_is_a_configuration_error(env: dict[str, str]) -> None:
    """If Discord closes the gateway with 4004 (authentication failed) later on, the bridge stops with a config error."""
    from clankie.errors import ConfigError
    from tests.bridge.harness import running

    async def main() -> None:
        async with running(env) as h:
            assert h.task is not None
            await h.fake.close_gateway(4004)
            with pytest.raises(ConfigError, match="rejected the bot token"):
                async with asyncio.timeout(20):
                    await h.task
            assert h.app.discord_status == "failed: token rejected"

    asyncio.run(main())
