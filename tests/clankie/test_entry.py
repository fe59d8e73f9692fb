"""The one child skeleton (:func:`clankie.entry.run_child`), shown once through real processes.

``tests/clankie/entry_child.py`` is a child whose body only reports what it
holds; the service, the bridge and the hosts are the same skeleton with
their own specs (their process tests cover what their bodies do).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from clankie.errors import EX_CONFIG
from clankie.secrets import hand_over

REPO = Path(__file__).resolve().parents[2]
SECRETS = {"DISCORD_TOKEN": "tok-in-env", "ANTHROPIC_API_KEY": "key-in-env", "CLANKIE_DISCORD_TOKEN": "tok-2"}
SETTLED = {"on": True, "frozen": True}
"""The collector of a child whose body runs: on again, the start's survivors frozen (clankie.heap)."""


async def _start(mode: str, env: dict[str, str], pass_fds: tuple[int, ...] = ()) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.clankie.entry_child", mode, cwd=REPO, pass_fds=pass_fds,
        env={**env, "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )


async def _report(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    assert proc.stdout is not None
    async with asyncio.timeout(30):
        line = await proc.stdout.readline()
    assert line, "the child ended before its body ran"
    report: dict[str, Any] = json.loads(line)
    return report


async def _finish(proc: asyncio.subprocess.Process) -> tuple[int, list[str], list[str]]:
    async with asyncio.timeout(30):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    lines = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
    return proc.returncode, out.decode().split(), lines


@pytest.mark.parametrize("mode", ["keep", "drop", "park"])
def test_a_bad_setting_is_one_line_on_stderr_and_exit_78_whatever_the_order(env: dict[str, str], mode: str) -> None:
    async def main() -> None:
        proc = await _start(mode, {**env, "CLANKIE_POISON_RUNS": "0"})
        code, out, err = await _finish(proc)
        assert code == EX_CONFIG and out == [], out
        assert len(err) == 1 and err[0].startswith("testchild: ") and "CLANKIE_POISON_RUNS" in err[0], err

    asyncio.run(main())


def test_a_child_that_keeps_no_secret_holds_none_and_nothing_it_spawns_inherits_one(env: dict[str, str]) -> None:
    async def main() -> None:
        proc = await _start("drop", {**env, **SECRETS, "CREDENTIALS_DIRECTORY": "/nonexistent"})
        report = await _report(proc)
        assert report == {"inherited": [], "held": [], "observed": {"meter": False, "at_build": ["no metrics"]},
                          "collector": SETTLED}
        proc.send_signal(signal.SIGTERM)
        code, out, err = await _finish(proc)
        assert code == 0 and out == ["closed"], (code, out, err)

    asyncio.run(main())


def test_a_child_that_keeps_secrets_holds_them_in_its_settings_and_spawns_nothing_with_one(env: dict[str, str]) -> None:
    """The handed-over pipe reaches the settings; neither it nor an env secret reaches a spawned process."""

    async def main() -> None:
        fd = hand_over({"anthropic_api_key": "key-on-pipe"})
        os.set_inheritable(fd, True)
        try:
            proc = await _start("keep", {**env, "DISCORD_TOKEN": "tok-in-env", "CLANKIE_SECRETS_FD": str(fd)}, (fd,))
        finally:
            os.close(fd)
        report = await _report(proc)
        assert report == {"inherited": [], "held": ["anthropic_api_key", "discord_token"],
                          "observed": {"meter": False, "at_build": ["no metrics"]}, "collector": SETTLED}
        proc.send_signal(signal.SIGTERM)
        code, out, err = await _finish(proc)
        assert code == 0 and out == ["closed"], (code, out, err)
        assert not any("key-on-pipe" in line or "tok-in-env" in line or "Traceback" in line for line in err), err

    asyncio.run(main())


@pytest.mark.parametrize("mode", ["drop", "park"])
def test_observability_is_configured_once_from_the_settings_before_the_body_is_built(env: dict[str, str], mode: str) -> None:
    """CLANKIE_METRICS_LISTEN set: the meter is on and the spec's own part was configured once, before the build,
    whether the settings are read at spawn or (a spare) after it is activated."""

    async def main() -> None:
        proc = await _start(mode, {**env, "CLANKIE_METRICS_LISTEN": "127.0.0.1:9464"})
        report = await _report(proc)
        assert report["observed"] == {"meter": True, "at_build": ["metrics"]}
        assert report["collector"] == SETTLED  # a spare too: settled before it parked
        proc.send_signal(signal.SIGTERM)
        code, out, err = await _finish(proc)
        assert code == 0 and out == ["closed"], (code, out, err)

    asyncio.run(main())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("mode", ["keep", "park"])
def test_sigterm_and_ctrl_c_stop_the_body_and_close_it_with_exit_0(env: dict[str, str], mode: str, sig: int) -> None:
    async def main() -> None:
        proc = await _start(mode, env)
        await _report(proc)
        proc.send_signal(sig)
        code, out, err = await _finish(proc)
        assert code == 0 and out == ["closed"], (code, out, err)
        assert not any("Traceback" in line for line in err), err

    asyncio.run(main())


@pytest.mark.parametrize(("mode", "status", "words"), [("ends", 1, None), ("refuses", EX_CONFIG, "the test body refuses")])
def test_a_body_that_ends_by_itself_is_closed_and_mapped_to_its_exit_status(
    env: dict[str, str], mode: str, status: int, words: str | None
) -> None:
    async def main() -> None:
        proc = await _start(mode, env)
        await _report(proc)
        code, out, err = await _finish(proc)
        assert code == status and out == ["closed"], (code, out, err)
        if words is not None:
            assert err == [f"testchild: {words}"], err

    asyncio.run(main())
