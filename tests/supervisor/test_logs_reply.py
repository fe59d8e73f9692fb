"""``logs`` replies stay under the frame limit however many lines are asked for."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from clankie import settings as settings_mod
from clankie.clock import SystemClock
from supervisor import ctl
from supervisor.control import Control
from supervisor.output import REPLY_LIMIT, read_tail
from supervisor.spec import ChildSpec
from supervisor.tree import Tree


def write_lines(path: Path, total: int) -> bytes:
    line = b"y" * 1023 + b"\n"
    data = line * (total // len(line))
    path.write_bytes(data)
    return data


def test_read_tail_of_a_huge_file_is_capped_and_says_so(tmp_path: Path) -> None:
    """Asking for 100000 lines of a 10 MiB log returns at most the cap, whole lines, after a truncation notice."""
    log = tmp_path / "x.log"
    data = write_lines(log, 10 * 1024 * 1024)
    out, offset = read_tail(log, 100_000)
    assert offset == len(data)
    assert len(out) <= REPLY_LIMIT
    head, _, body = out.partition(b"\n")
    assert b"truncated" in head
    assert body and data.endswith(body) and body.startswith(b"y" * 1023 + b"\n")


def test_read_tail_within_the_cap_is_exact(tmp_path: Path) -> None:
    """A tail that fits is returned byte for byte, without a notice."""
    log = tmp_path / "x.log"
    log.write_bytes(b"a\nb\nc\nd")
    assert read_tail(log, 2) == (b"c\nd", 7)
    log.write_bytes(b"a\nb\nc\n")
    assert read_tail(log, 2) == (b"b\nc\n", 6)
    assert read_tail(log, 10) == (b"a\nb\nc\n", 6)
    assert read_tail(tmp_path / "missing.log", 5) == (b"", 0)


def test_read_tail_respects_a_smaller_limit(tmp_path: Path) -> None:
    """The cap follows the limit given (the control socket passes half the frame limit)."""
    log = tmp_path / "x.log"
    write_lines(log, 64 * 1024)
    out, _ = read_tail(log, 1000, limit=4096)
    assert len(out) <= 4096 and b"truncated" in out.split(b"\n", 1)[0]


def test_clankiectl_logs_n_100000_of_a_10_mib_log_answers(
    env: dict[str, str], runtime_dir: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """`clankiectl logs NAME -n 100000` on a 10 MiB log prints the truncated tail and exits 0, not 69."""

    async def go() -> int:
        settings = settings_mod.load(env)
        tree = Tree(settings, [ChildSpec(name="big", argv=("true",))], clock=SystemClock(), env=env, subreaper=False)
        write_lines(tree.children["big"].log_path, 10 * 1024 * 1024)
        control = Control(tree)
        path = runtime_dir / "control.sock"
        await control.start(path)
        try:
            return await asyncio.to_thread(ctl.main, ["--socket", str(path), "--timeout", "5", "logs", "big", "-n", "100000"])
        finally:
            await control.close()

    assert asyncio.run(go()) == 0
    out = capsysbinary.readouterr().out
    assert b"truncated" in out.split(b"\n", 1)[0] and REPLY_LIMIT // 2 < len(out) <= REPLY_LIMIT
