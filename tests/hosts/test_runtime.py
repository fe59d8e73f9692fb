"""The shared host runtime: deadlines, refusals, artifacts, and the process life of a host."""

from __future__ import annotations

import asyncio
import hashlib
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from clankie import ipc, paths
from clankie.errors import EX_CONFIG, RemoteError
from clankie.protocol import Artifact, DiagramRequest
from clankie.router import Route
from clankie.settings import Settings
from hosts.runtime import HostRuntime, write_artifact
from hosts.tldraw.examples import er_example
from tests.hosts.hostproc import HostProcess


class _Host:
    """A host whose one method does what the request's spec says."""

    name = "tldraw"
    deadlines: ClassVar[dict[str, float]] = {"draw_er_diagram": 0.2}
    timeout_code = "render_failed"

    def __init__(self) -> None:
        self.never = asyncio.Event()

    async def start(self) -> None:
        return None

    def routes(self) -> dict[str, Route]:
        return {"draw_er_diagram": self.draw, "draw_sequence_diagram": self.draw}

    async def draw(self, params: DiagramRequest) -> Artifact:
        action = params.spec["do"]
        if action == "hang":
            await self.never.wait()
        if action == "refuse":
            raise RemoteError("diagram_invalid", "no")
        if action == "crash":
            raise KeyError("bug")
        return Artifact(ref="r", sha256="s", size=1)

    def health(self) -> dict[str, Any]:
        return {"custom": 1}

    def detail(self) -> str:
        return "fake"

    async def close(self) -> None:
        return None


def test_requests_get_refusal_codes_instead_of_crashing_the_host(settings: Settings) -> None:
    """A hung request times out with the host's code, a bug becomes host_internal_error, a refusal keeps its code, and the host keeps serving."""

    async def main() -> None:
        runtime = HostRuntime(_Host(), settings, clock=None)  # type: ignore[arg-type]  # these tests never reach the clock
        await runtime.serve()
        conn = await ipc.connect(paths.socket_path(settings.runtime_dir, "tldraw"), "service")
        try:
            codes = {}
            for action in ("hang", "crash", "refuse"):
                with pytest.raises(RemoteError) as info:
                    await conn.request("draw_er_diagram", DiagramRequest(spec={"do": action}), timeout=10)
                codes[action] = info.value.code
            assert codes == {"hang": "render_failed", "crash": "host_internal_error", "refuse": "diagram_invalid"}
            with pytest.raises(RemoteError) as info:
                await conn.request("draw_sequence_diagram", DiagramRequest(spec={}), timeout=10)
            assert info.value.code == "method_not_found"
            ok = await conn.request("draw_er_diagram", DiagramRequest(spec={"do": "ok"}), timeout=10)
            assert isinstance(ok, Artifact)
            health = runtime.health()
            assert health["served"] == 1 and health["inflight"] == 0 and health["custom"] == 1
            assert health["refused"] == {"render_failed": 1, "host_internal_error": 1, "diagram_invalid": 1}
            assert health["attachment_root"] == str(settings.attachment_root)
        finally:
            await conn.aclose()
            assert runtime.server is not None
            await runtime.server.close()

    asyncio.run(main())


def test_write_artifact_describes_exactly_the_bytes_written(tmp_path: Path) -> None:
    """The artifact record's ref, digest, size and mime match the file written (0600 in a 0700 dir)."""

    async def main() -> Artifact:
        return await write_artifact(tmp_path / "root", "tldraw", b"<svg/>", "svg", extra_refs=("x",))

    art = asyncio.run(main())
    digest = hashlib.sha256(b"<svg/>").hexdigest()
    assert art == Artifact(ref=f"sha256:{digest}:tldraw/{digest}.svg", sha256=digest, size=6, mime="image/svg+xml", extra_refs=("x",))
    path = tmp_path / "root" / "tldraw" / f"{digest}.svg"
    assert path.read_bytes() == b"<svg/>" and path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_an_unwritable_root_is_a_refusal(tmp_path: Path) -> None:
    """If the attachment root cannot be written, the caller gets artifact_write_failed."""
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")

    async def main() -> None:
        with pytest.raises(RemoteError) as info:
            await write_artifact(blocker, "browser", b"x", "png")
        assert info.value.code == "artifact_write_failed"

    asyncio.run(main())


@pytest.mark.parametrize(
    ("name", "bad"),
    [("tldraw", {"CLANKIE_HEARTBEAT_SECONDS": "-1"}), ("browser", {"CLANKIE_BROWSER_PINNED_HOSTS": "nonsense"})],
)
def test_bad_settings_exit_78_with_one_line(env: dict[str, str], name: str, bad: dict[str, str]) -> None:
    """A host with an invalid setting exits with status 78 and names the setting on its last stderr line."""

    async def main() -> tuple[int, bytes]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", f"hosts.{name}", env={**env, **bad}, stderr=asyncio.subprocess.PIPE
        )
        _out, err = await asyncio.wait_for(proc.communicate(), 30)
        return proc.returncode or 0, err

    code, err = asyncio.run(main())
    assert code == EX_CONFIG
    last = err.decode().strip().splitlines()[-1]
    assert last.startswith(f"{name}: ") and next(iter(bad)) in last


@pytest.mark.slow
def test_a_host_says_ready_beats_and_stops_cleanly_on_shutdown(env: dict[str, str], tmp_path: Path) -> None:
    """The tldraw host says ready over the link, heartbeats with its health, serves, and on shutdown says stopping, removes its socket and exits 0."""

    async def main() -> None:
        host = HostProcess("tldraw", {**env, "CLANKIE_HEARTBEAT_SECONDS": "0.2"}, tmp_path / "host.log")
        await host.start()
        beat = await host.next_heartbeat()
        assert beat.seq >= 1 and beat.detail.startswith("tldraw")
        assert beat.report["attachment_root"] == str(Path(env["CLANKIE_STATE"]) / "attachments")
        conn = await host.client()
        await conn.request("draw_er_diagram", DiagramRequest(spec=er_example(3)), timeout=30)
        await conn.aclose()
        later = await host.next_heartbeat()
        assert later.seq > beat.seq and later.report["served"] == 1 and later.report["rendered"] == 1
        assert await host.shutdown() == 0
        assert host.stopping and not host.socket.exists()
        assert host.link is not None
        await host.link.aclose()

    asyncio.run(main())


@pytest.mark.slow
def test_a_second_host_on_a_live_socket_is_refused(env: dict[str, str], tmp_path: Path) -> None:
    """Starting a second tldraw host while one is serving exits 78 and leaves the first one serving."""

    async def main() -> None:
        async with HostProcess("tldraw", env, tmp_path / "one.log") as first:
            second = HostProcess("tldraw", env, tmp_path / "two.log")
            await second.start(wait_ready=False)
            assert second.proc is not None
            assert await asyncio.wait_for(second.proc.wait(), 30) == EX_CONFIG
            assert second.link is not None
            await second.link.aclose()
            conn = await first.client()
            art = await conn.request("draw_er_diagram", DiagramRequest(spec=er_example(2)), timeout=30)
            await conn.aclose()
            assert isinstance(art, Artifact)

    asyncio.run(main())
