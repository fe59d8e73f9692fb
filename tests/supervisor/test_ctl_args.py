"""clankiectl: bad arguments are usage errors, and every wait is bounded."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from clankie import ipc
from clankie.protocol import Record
from supervisor import ctl
from supervisor.ctl_args import bounded, parser


@pytest.mark.parametrize(
    ("argv", "argument"),
    [
        (["say", "room", ""], "TEXT"),
        (["say", "room", "x" * 8001], "TEXT"),
        (["say", "", "hi"], "ROOM"),
        (["logs", "service", "-n", "200000"], "-n/--lines"),
        (["restart", "n" * 33], "NAME"),
        (["logs", "n" * 33], "NAME"),
    ],
)
def test_arguments_the_records_refuse_are_usage_errors(
    argv: list[str], argument: str, runtime_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad argument prints which one is wrong and exits 2, without a traceback or a supervisor."""
    code = ctl.main(["--socket", str(runtime_dir / "control.sock"), *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert f"bad argument: {argument}:" in err and "Traceback" not in err
    assert "x" * 50 not in err  # the value itself is not echoed


def hung(runtime_dir: Path, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run clankiectl against a control server that completes hello but never answers a request."""

    async def never(conn: ipc.Connection, method: str, params: Record) -> Record | None:
        await asyncio.Event().wait()
        return None

    async def go() -> int:
        path = runtime_dir / "control.sock"
        server = await ipc.serve(path, "supervisor-control", never)
        try:  # the bound is asserted here: clankiectl must give up by itself, long before 10 s
            return await asyncio.wait_for(asyncio.to_thread(ctl.main, ["--socket", str(path), *argv]), 10)
        finally:
            await server.close()

    code = asyncio.run(go())
    return code, capsys.readouterr().err


@pytest.mark.parametrize("verb", ["start", "stop", "restart"])
def test_start_stop_restart_give_up_on_a_hung_supervisor(
    verb: str, runtime_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """start/stop/restart wait --timeout + --wait, then say the supervisor is not answering (69)."""
    code, err = hung(runtime_dir, ["--timeout", "0.2", verb, "service", "--wait", "0.3"], capsys)
    assert code == 69 and f"did not answer {verb}" in err and "Traceback" not in err


def test_say_gives_up_on_a_hung_supervisor_after_its_wait(runtime_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """say waits --timeout + --wait for the turn, then exits 69."""
    code, err = hung(runtime_dir, ["--timeout", "0.2", "say", "room", "hi", "--wait", "0.3"], capsys)
    assert code == 69 and "did not answer say" in err


def test_waits_default_to_the_stop_budget_and_a_long_turn(capsys: pytest.CaptureFixture[str]) -> None:
    """--wait defaults: 25 s (the stop budget) for stop/restart, 600 s for say; 0 means forever."""
    p = parser()
    assert p.parse_args(["stop", "all"]).wait == 25.0
    args = p.parse_args(["--timeout", "3", "say", "r", "t"])
    assert args.wait == 600.0 and bounded(args) == 603.0
    assert bounded(p.parse_args(["say", "r", "t", "--wait", "0"])) is None
    ctl.main(["say", "--help"])
    assert "--wait" in capsys.readouterr().out
