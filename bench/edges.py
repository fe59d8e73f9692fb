"""Edges: the metrics port under a flood of idle connections, on the real tree, against the tree before issue 37.

``clankie run`` with its four real children (no secrets: the bridge runs
local-only, turns would fail unconfigured; neither matters here), the metrics
port on loopback and ``RLIMIT_NOFILE`` 1,024 for the whole tree. First idle:
``status`` and a scrape, each timed. Then a flood: 1,100 TCP connections to the
metrics port, opened one after another and never sent a byte, held for the
rest of the run; during it ``status`` and scrapes again, and the bytes the
supervisor writes to its log over a fixed hold.

Side by side in the same run: this tree, and the tree at ``--base`` (default
``2f2cee0``, main before issue 37; its code is exported with ``git archive``
into a temporary directory, no worktree).

Run: ``.venv/bin/python bench/edges.py [--flood 1100] [--tries 20] [--hold 10] [--base REV]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from clankie import ipc
from clankie.errors import ClankieError
from clankie.protocol import Empty, StatusReply

REPO = Path(__file__).resolve().parents[1]
BASE_REV = "2f2cee0"  # main before issue 37
LIMIT = 1024


@dataclass
class Result:
    name: str
    idle_status_ms: list[float] = field(default_factory=list)
    idle_scrape_ms: list[float] = field(default_factory=list)
    connected: int = 0
    status_ok: int = 0
    status_ms: list[float] = field(default_factory=list)
    scrape_ok: int = 0
    scrape_ms: list[float] = field(default_factory=list)
    tries: int = 0
    log_bytes: int = 0

    @staticmethod
    def p50(xs: list[float]) -> float:
        return statistics.median(xs) if xs else float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


async def status(sock: Path) -> bool:
    try:
        conn = await ipc.connect(sock, "bench", timeout=3)
    except (OSError, ClankieError):
        return False
    try:
        await conn.request("status", Empty(), timeout=3, expect=StatusReply)
        return True
    except (OSError, ClankieError):
        return False
    finally:
        await conn.aclose()


def scrape(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as reply:
            return reply.status == 200 and b"clankie_child_up" in reply.read()
    except OSError:
        return False


async def timed_status(sock: Path) -> tuple[bool, float]:
    start = time.perf_counter()
    ok = await status(sock)
    return ok, (time.perf_counter() - start) * 1000


async def timed_scrape(port: int) -> tuple[bool, float]:
    start = time.perf_counter()
    ok = await asyncio.to_thread(scrape, port)
    return ok, (time.perf_counter() - start) * 1000


async def ready(sock: Path, proc: subprocess.Popen[bytes], deadline: float) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"clankie run exited {proc.returncode}")
        with contextlib.suppress(OSError, ClankieError):
            conn = await ipc.connect(sock, "bench", timeout=3)
            try:
                reply = await conn.request("status", Empty(), timeout=3, expect=StatusReply)
            finally:
                await conn.aclose()
            if reply.children and all(c.state == "running" for c in reply.children):
                return
        await asyncio.sleep(0.2)  # sleep: the step of a loop that checks the tree's state
    raise SystemExit("the tree never came up")


async def run_tree(name: str, code: Path, args: argparse.Namespace) -> Result:
    result = Result(name, tries=args.tries)
    tmp = Path(tempfile.mkdtemp(prefix="ck-edges-", dir="/tmp"))
    state, runtime, log = tmp / "state", tmp / "run", tmp / "supervisor.log"
    state.mkdir(mode=0o700)
    port = free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(state), "CLANKIE_STATE": str(state),
           "CLANKIE_RUNTIME_DIR": str(runtime), "PYTHONPATH": str(code), "CLANKIE_METRICS_LISTEN": f"127.0.0.1:{port}"}
    held: list[socket.socket] = []
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", "import sys; from supervisor.app import main; sys.exit(main())",
                                 "run"], env=env, cwd=code, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                preexec_fn=limit_files)
    sock = runtime / "control.sock"
    try:
        await ready(sock, proc, time.monotonic() + 120)
        for _ in range(args.tries):
            result.idle_status_ms.append((await timed_status(sock))[1])
            result.idle_scrape_ms.append((await timed_scrape(port))[1])
        for _ in range(args.flood):
            try:
                held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
            except OSError:
                break
        result.connected = len(held)
        before = log.stat().st_size
        for _ in range(args.tries):
            ok, ms = await timed_status(sock)
            result.status_ok += ok
            result.status_ms += [ms] if ok else []
            ok, ms = await timed_scrape(port)
            result.scrape_ok += ok
            result.scrape_ms += [ms] if ok else []
        await asyncio.sleep(args.hold)  # sleep: the fixed window whose log bytes are counted
        result.log_bytes = log.stat().st_size - before
    finally:
        for s in held:
            s.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return result


@contextlib.contextmanager
def exported(rev: str) -> Iterator[Path]:
    """The tree at ``rev``, exported with ``git archive`` into a temporary directory (removed afterwards)."""
    path = Path(tempfile.mkdtemp(prefix="ck-base-", dir="/tmp"))
    data = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(path, filter="data")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def row(r: Result) -> str:
    return (f"{r.name:<6} idle: status p50 {r.p50(r.idle_status_ms):.1f} ms, scrape p50 {r.p50(r.idle_scrape_ms):.1f} ms"
            f" | flood of {r.connected} idle: status {r.status_ok}/{r.tries} (p50 {r.p50(r.status_ms):.1f} ms), "
            f"scrape {r.scrape_ok}/{r.tries} (p50 {r.p50(r.scrape_ms):.1f} ms), log {r.log_bytes} B")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--flood", type=int, default=1100)
    p.add_argument("--tries", type=int, default=20)
    p.add_argument("--hold", type=float, default=10.0)
    p.add_argument("--base", default=BASE_REV)
    args = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * args.flood)), hard))  # the flood is ours
    now = asyncio.run(run_tree("now", REPO, args))
    with exported(args.base) as code:
        base = asyncio.run(run_tree("base", code, args))
    print(row(now))
    print(row(base))
    print(f"bench edges: flood={now.connected} status_ok={now.status_ok}/{now.tries} scrape_ok={now.scrape_ok}/{now.tries} "
          f"status_p50_ms={now.p50(now.status_ms):.1f} scrape_p50_ms={now.p50(now.scrape_ms):.1f} log_bytes={now.log_bytes} "
          f"base_flood={base.connected} base_status_ok={base.status_ok}/{base.tries} "
          f"base_scrape_ok={base.scrape_ok}/{base.tries} base_log_bytes={base.log_bytes}")


if __name__ == "__main__":
    main()
