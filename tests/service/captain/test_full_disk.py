"""A full disk is a state, not a stack trace: a turn the disk refuses fails with its code in one log line."""

from __future__ import annotations

import errno
import logging
from typing import Any

import pytest

from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from service.agent.session import SessionTree
from service.captain.lanes.lane_log import LaneLog
from service.captain.records import disk_failure
from tests.service.captain.harness import FakeBridge, msg, run, service


def full(*_: Any, **__: Any) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def lines_about(caplog: pytest.LogCaptureFixture, delivery_id: str) -> list[logging.LogRecord]:
    """Warnings and errors that name the delivery."""
    return [r for r in caplog.records if r.levelno >= logging.WARNING and delivery_id in r.getMessage()]


def test_which_refusals_are_the_disks() -> None:
    """No space, quota or size limit: ``service_disk_full``; a failing or read-only disk: ``service_disk_error``;
    anything else is not the disk's (it stays a loud bug)."""
    codes = [disk_failure(OSError(e, "x")) for e in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS)]
    assert codes == ["service_disk_full"] * 3 + ["service_disk_error"] * 2
    assert disk_failure(OSError(errno.EACCES, "x")) is None and disk_failure(OSError("no errno")) is None


def test_a_lane_log_the_disk_refuses_fails_the_turn_in_one_line(env: dict[str, str], caplog: pytest.LogCaptureFixture,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The turn's first record is its lane log line; refused, the turn is not run and fails ``service_disk_full``,
    said in one error line naming the delivery, with no traceback."""
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(LaneLog, "heard", full)

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            result = await bridge.submit(msg("d1", "hello"))
            assert (result.outcome, result.code) == ("failed", "service_disk_full")
            assert fake.requests == []  # not run

    run(body())
    about = lines_about(caplog, "d1")
    assert [(r.levelname, r.exc_info) for r in about] == [("ERROR", None)], [r.getMessage() for r in about]
    assert "service_disk_full" in about[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and r is not about[0]]


def test_a_session_the_disk_refuses_mid_run_fails_the_turn_in_one_line(env: dict[str, str],
                                                                       caplog: pytest.LogCaptureFixture,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose session line the disk refuses ends; its turn fails ``service_disk_full`` in one error line naming
    the delivery, with no traceback; once the disk takes lines again the room's next turn is answered."""
    caplog.set_level(logging.INFO)

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            fake.script(fa.text("hi"))
            assert (await bridge.submit(msg("d0", "warm up"))).outcome == "settled"
            with monkeypatch.context() as patch:
                patch.setattr(SessionTree, "append", full)
                fake.script(fa.text("never kept"))
                result = await bridge.submit(msg("d1", "hello again"))
            assert (result.outcome, result.code) == ("failed", "service_disk_full")
            fake.script(fa.text("back"))
            assert (await bridge.submit(msg("d2", "and now?"))).outcome == "settled"

    run(body())
    about = lines_about(caplog, "d1")
    assert [(r.levelname, r.exc_info) for r in about] == [("ERROR", None)], [r.getMessage() for r in about]
    assert "service_disk_full" in about[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)
