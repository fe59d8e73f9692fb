"""Issue 14 item 5: state on a full 8 MiB filesystem, for real (a tmpfs in a private mount namespace).

The supervisor runs as ``unshare --mount … mount -t tmpfs -o size=8m …;
exec clankie run`` so the small filesystem exists only in its namespace and
disappears with it; the test reaches it through ``/proc/<pid>/root``. A
chatty child keeps writing; the test fills the disk, checks that the
supervisor keeps going, says so in ``status``, and leaves no torn line in the
log; then frees the space and checks that logging resumes with a note of
the gap. The second test does the same to the bridge's receipts and the
captain's lane log (``clankie.jsonl.append_all``).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from clankie.protocol import StatusReply
from tests.supervisor.harness import FIXTURE, REPO, Running, listening, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

LINE = re.compile(rb"^(chatter \d+ x+|started \d+|\[clankie: \d+ bytes of output were not written here: .+\])$")


def need_root_and_unshare() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a small private filesystem")


def in_small_fs(state: Path, size: str = "8m", then: str = "") -> list[str]:
    """A command prefix: a private mount namespace with a ``size`` tmpfs (mode 0700) on ``state``.

    Without ``then`` the command is exec'd (its pid is the one Popen returns); with it, ``then`` runs after
    the command, still inside the namespace.
    """
    run = f'"$@"{then}' if then else 'exec "$@"'
    script = f'mount -t tmpfs -o size={size},mode=0700 clankie-test "{state}" && {run}'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]


PAGE = os.sysconf("SC_PAGE_SIZE")


def fill(path: Path) -> None:
    """Write zeros to ``path`` until the filesystem is full."""
    block = b"\0" * 65536
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            try:
                os.write(fd, block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                block = block[: len(block) // 2]
                if not block:
                    return
    finally:
        os.close(fd)


@pytest.fixture
def full_disk_tree(tmp_path: Path, runtime_dir: Path) -> Iterator[Running]:
    need_root_and_unshare()
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps([{"name": "chatty", "argv": ["{python}", str(FIXTURE), "--chatter", "0.002"]}]))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(state), "PYTHONPATH": str(REPO),
        "CLANKIE_STATE": str(state), "CLANKIE_RUNTIME_DIR": str(runtime_dir),
        "CLANKIE_HEARTBEAT_SECONDS": "0.2", "CLANKIE_STALL_TICK_SECONDS": "0.2",
    }
    err = tmp_path / "supervisor.stderr"
    with err.open("wb") as errf:
        proc = subprocess.Popen(
            [*in_small_fs(state), sys.executable, "-m", "supervisor", "run", "--spec-file", str(spec)],
            env=env, stdin=subprocess.DEVNULL, stdout=errf, stderr=errf, cwd=REPO,
        )
    # unshare and sh exec: this pid is the supervisor; its view of the state dir is the small tmpfs
    run = Running(proc, runtime_dir, Path(f"/proc/{proc.pid}/root") / state.relative_to("/"), err)
    try:
        wait_for(lambda: listening(run.sock) or proc.poll() is not None, 20, "the control socket")
        assert proc.poll() is None, run.stderr()
        run.wait_state("chatty", "running")
        yield run
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def at_rest(path: Path) -> bytes:
    """The log's bytes once its end is a line's end. A write that fails part-way is cut back at once
    (``clankie.appender``), and a read that falls between the two sees the torn piece for that moment (a fresh
    clone's run did); a tear that stays never ends the wait, and fails it."""
    rest = wait_for(lambda: (data := path.read_bytes()).endswith(b"\n") and data, 20, "no torn last line")
    assert isinstance(rest, bytes)
    return rest


def whole_lines(data: bytes) -> list[bytes]:
    """The lines of a log read at rest (:func:`at_rest`), each a whole line of its format."""
    lines = data[:-1].split(b"\n")
    bad = [line[:80] for line in lines if not LINE.match(line)]
    assert bad == [], bad[:5]
    return lines


def test_a_full_disk_costs_log_lines_never_the_supervisor_and_logging_resumes(full_disk_tree: Running) -> None:
    """ENOSPC: no OSError escapes, no torn line, status and the log say so; space back: the log resumes with a gap note."""
    sup = full_disk_tree
    log_file = sup.state / "logs" / "chatty.log"
    filler = sup.state / "filler"
    wait_for(lambda: log_file.stat().st_size > 2000, 20, "some chatter in the log")
    fill(filler)

    def disk_reported() -> StatusReply | None:
        st = sup.status()
        return st if st.supervisor.disk and st.children[0].log_error else None

    st = wait_for(disk_reported, 20, "status to report the full disk")
    assert "No space left on device" in st.children[0].log_error
    assert "state filesystem full" in st.supervisor.disk and "chatty" in st.supervisor.disk
    before = at_rest(log_file)  # its size and its lines from one read
    size = len(before)
    wait_for(lambda: "bytes not written" in sup.child("chatty").log_error and
             int(sup.child("chatty").log_error.split("; ")[1].split()[0]) > 2000, 20, "output to be lost")
    # Nothing half-written. A "full" tmpfs still takes a whole line that fits in the slack of the log's last page, so
    # the log may grow, but never past that page, and what it holds is whole lines in order.
    after = at_rest(log_file)
    grown = len(after)
    assert size <= grown <= -(-size // PAGE) * PAGE, (size, grown)
    assert len(whole_lines(after)) >= len(whole_lines(before))
    assert sup.proc.poll() is None and sup.child("chatty").restarts == 0
    text = subprocess.run(
        [str(Path(sys.executable).with_name("clankiectl")), "--socket", str(sup.sock), "status"],
        capture_output=True, text=True, timeout=30,
    )
    assert text.returncode == 0 and "!! disk:" in text.stdout and "No space left" in text.stdout, text

    filler.unlink()
    wait_for(lambda: not sup.status().supervisor.disk, 20, "status to clear once space is back")
    wait_for(lambda: log_file.stat().st_size > size + 2000, 20, "the log to resume")
    lines = whole_lines(at_rest(log_file))
    gap = [line for line in lines if line.startswith(b"[clankie:")]
    # One note per stretch of lost output. A "full" tmpfs still takes a short write that fits in the last page the
    # log already has, so on a busy machine one outage can be two stretches with a line or a note between them.
    assert gap and all(b"No space left on device" in g for g in gap), gap
    numbers = [int(line.split()[1]) for line in lines if line.startswith(b"chatter")]
    assert numbers == sorted(numbers)  # lines were lost, none reordered or repeated
    assert "cannot write chatty.log: No space left on device" in sup.stderr()
    assert "Traceback" not in sup.stderr()


WRITER = r"""
import os, sys, time
from pathlib import Path
from bridge.receipts import Receipts
from service.captain.records import append_line

state = Path(sys.argv[1])
filler = state / "filler"
receipts = Receipts(state, wall=time.time)
lane = state / "captain" / "lanes" / "room.jsonl"
append_line(lane, {"kind": "heard", "n": -1})
fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
block = b"\0" * 65536
while block:
    try:
        os.write(fd, block)
    except OSError:
        block = block[: len(block) // 2]
os.ftruncate(fd, os.fstat(fd).st_size - 6000)  # a page or two left: the next lines straddle the end of the disk
os.close(fd)
lane_failures = 0
for n in range(200):
    receipts.record("accepted", delivery_id="d-" + "x" * 100 + str(n), channel_id="c" * 100, reason="r" * 100)
    try:
        append_line(lane, {"kind": "heard", "n": n, "pad": "y" * 300})
    except OSError:
        lane_failures += 1
filler.unlink()
receipts.record("settled", delivery_id="after-space-returned", channel_id="c")
append_line(lane, {"kind": "said", "n": "after"})
print(lane_failures)
"""


def test_receipts_and_lane_logs_leave_no_torn_line_on_a_full_disk(tmp_path: Path) -> None:
    """The bridge's receipts and the captain's lane log on a disk that fills mid-line: whole lines only, and they carry on."""
    need_root_and_unshare()
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    outside = tmp_path / "copy"
    copy = f' && cp -r "{state}/receipts" "{state}/captain" "{outside}"'  # the tmpfs goes with the namespace
    script = in_small_fs(state, "1m", then=copy)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO), "HOME": str(state)}
    outside.mkdir()
    done = subprocess.run([*script, sys.executable, "-c", WRITER, str(state)], env=env, capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) > 0  # the disk really was full for the lane log
    assert done.stderr.count("receipts not written (disk_full)") == 1  # one line for the stretch, not one per receipt
    assert "receipts written again" in done.stderr
    for path in (outside / "receipts" / "bridge.jsonl", outside / "captain" / "lanes" / "room.jsonl"):
        data = path.read_bytes()
        assert data.endswith(b"\n")
        records = [json.loads(line) for line in data.splitlines()]  # every line parses: none torn
        assert records[-1].get("delivery_id") == "after-space-returned" or records[-1].get("n") == "after"
