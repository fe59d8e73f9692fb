"""Socket paths and governed artifacts: one writer, one resolver, one root."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from clankie import artifacts, paths
from clankie.errors import ConfigError


def test_socket_paths_live_in_the_runtime_dir(runtime_dir: Path) -> None:
    """Each socket has a fixed name in the runtime dir."""
    assert paths.socket_path(runtime_dir, "service") == runtime_dir / "service.sock"


def test_a_socket_path_over_107_bytes_is_a_clear_startup_error(tmp_path: Path) -> None:
    """A runtime dir too deep for sun_path is reported with the fix."""
    deep = tmp_path / ("x" * 120)
    with pytest.raises(ConfigError, match="CLANKIE_RUNTIME_DIR"):
        paths.socket_path(deep, "control")


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_an_existing_dir_open_to_group_or_other_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """A 0755 dir the project did not create is named in the refusal and keeps its mode and contents."""
    d = tmp_path / "run"
    d.mkdir()
    d.chmod(0o755)
    (d / "theirs").write_text("keep me")
    with pytest.raises(ConfigError, match=r"refusing .*/run: mode 0755 gives group/other access"):
        paths.ensure_private_dir(d)
    assert _mode(d) == 0o755 and (d / "theirs").read_text() == "keep me"


def test_a_dir_owned_by_another_uid_is_refused_and_its_owner_kept(tmp_path: Path) -> None:
    """Ownership is checked, never changed."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a directory owned by another uid")
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)
    with pytest.raises(ConfigError, match="belongs to uid 65534"):
        paths.ensure_private_dir(d)
    assert d.stat().st_uid == 65534 and _mode(d) == 0o700


def test_a_file_where_a_dir_should_be_is_refused(tmp_path: Path) -> None:
    """A plain file at the path (or in the way of its parents) is a configuration error, not a traceback."""
    f = tmp_path / "state"
    f.write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        paths.ensure_private_dir(f)
    with pytest.raises(ConfigError, match="cannot create or reach"):
        paths.ensure_private_dir(f / "sub")
    assert f.read_text() == "x"


def test_every_directory_the_project_creates_is_0700_parents_included(tmp_path: Path) -> None:
    """Missing components are created 0700 whatever the umask, existing ones are left alone."""
    base = tmp_path / "base"
    base.mkdir()
    base.chmod(0o755)
    old = os.umask(0)
    try:
        paths.ensure_private_dir(base / "a" / "b")
        paths.make_private_dirs(base / "c" / "d" / "e")
    finally:
        os.umask(old)
    for d in (base / "a", base / "a" / "b", base / "c", base / "c" / "d", base / "c" / "d" / "e"):
        assert _mode(d) == 0o700, d
    assert _mode(base) == 0o755


def test_an_attachment_root_open_to_others_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """write_artifact never chmods the root it was pointed at, and writes nothing under a refused one."""
    root = tmp_path / "pictures"
    root.mkdir()
    root.chmod(0o755)
    with pytest.raises(ConfigError, match="pictures: mode 0755"):
        artifacts.write_artifact(root, "browser", b"png", "png")
    assert _mode(root) == 0o755 and list(root.iterdir()) == []


def test_written_artifact_resolves_to_the_same_bytes(tmp_path: Path) -> None:
    """What a host writes, the bridge reads back, verified by hash."""
    root = tmp_path / "attachments"
    ref = artifacts.write_artifact(root, "browser", b"\x89PNG fake", "png")
    digest = hashlib.sha256(b"\x89PNG fake").hexdigest()
    assert ref == f"sha256:{digest}:browser/{digest}.png"
    assert (root / "browser").stat().st_mode & 0o777 == 0o700
    assert (root / "browser" / f"{digest}.png").stat().st_mode & 0o777 == 0o600
    got = artifacts.resolve_artifact(root, ref, 1024)
    assert got.data == b"\x89PNG fake" and got.content_type == "image/png"


def test_two_writes_of_the_same_bytes_at_once_both_land(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two screenshots of one page at once are the same bytes, so the same file: each write has a temp name of its
    own, so neither rename finds its temp file gone (the first rename here waits until the second is done)."""
    root = tmp_path / "root"
    data = b"\x89PNG the same page twice"
    real_replace = os.replace
    first_renaming, second_done = threading.Event(), threading.Event()
    temps: list[str] = []

    def replace(src: str, dst: str, **kw: int) -> None:
        temps.append(src)
        if len(temps) == 1:  # the first write reached its rename: let the second one run all the way first
            first_renaming.set()
            second_done.wait(10)
        real_replace(src, dst, **kw)

    monkeypatch.setattr(os, "replace", replace)
    refs: list[str] = []
    errors: list[BaseException] = []

    def first() -> None:
        try:
            refs.append(artifacts.write_artifact(root, "browser", data, "png"))
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=first)
    thread.start()
    assert first_renaming.wait(10)
    try:
        refs.append(artifacts.write_artifact(root, "browser", data, "png"))
    finally:
        second_done.set()
        thread.join(10)
    assert errors == [] and len(set(refs)) == 1 and len(refs) == 2
    assert temps[0] != temps[1]
    assert sorted(p.name for p in (root / "browser").iterdir()) == [f"{hashlib.sha256(data).hexdigest()}.png"]


@pytest.mark.parametrize(
    "ref",
    [
        "sha256:" + "a" * 64 + ":browser/../../etc/passwd",
        "sha256:" + "a" * 64 + ":shell/" + "a" * 64 + ".png",
        "sha256:" + "a" * 64 + ":browser/" + "b" * 64 + ".png",
        "sha256:" + "A" * 64 + ":browser/" + "A" * 64 + ".png",
        "/etc/passwd",
        "",
    ],
)
def test_hostile_refs_are_refused_before_any_file_access(tmp_path: Path, ref: str) -> None:
    """Anything outside the ref grammar is refused without touching the disk."""
    with pytest.raises(artifacts.ArtifactError) as info:
        artifacts.resolve_artifact(tmp_path / "does-not-exist", ref, 1024)
    assert info.value.code == "artifact_ref_invalid"


def test_tampered_missing_oversized_and_escaping_files_are_refused(tmp_path: Path) -> None:
    """Each way a picture can go bad has its own code."""
    root = tmp_path / "root"
    ref = artifacts.write_artifact(root, "tldraw", b"picture", "png")
    digest, sub, ext = artifacts.parse_ref(ref)
    target = root / sub / f"{digest}.{ext}"

    with pytest.raises(artifacts.ArtifactError) as info:
        artifacts.resolve_artifact(root, ref, 3)
    assert info.value.code == "artifact_too_large"

    target.write_bytes(b"tampered")
    with pytest.raises(artifacts.ArtifactError) as info:
        artifacts.resolve_artifact(root, ref, 1024)
    assert info.value.code == "artifact_hash_mismatch"

    outside = tmp_path / "secret.png"
    outside.write_bytes(b"picture")
    target.unlink()
    os.symlink(outside, target)
    with pytest.raises(artifacts.ArtifactError) as info:
        artifacts.resolve_artifact(root, ref, 1024)
    assert info.value.code == "artifact_outside_root"

    target.unlink()
    with pytest.raises(artifacts.ArtifactError) as info:
        artifacts.resolve_artifact(root, ref, 1024)
    assert info.value.code == "artifact_missing"


def _resolve_in_thread(root: Path, ref: str, unblock: Path) -> BaseException | artifacts.Resolved | None:
    """Run the resolver off-thread so a blocking open fails this test instead of hanging it."""
    box: list[BaseException | artifacts.Resolved] = []

    def run() -> None:
        try:
            box.append(artifacts.resolve_artifact(root, ref, 1024))
        except BaseException as exc:
            box.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(5.0)
    if worker.is_alive():  # stuck in open(): give it a writer so the thread can end
        fd = os.open(unblock, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        worker.join(5.0)
        return None
    return box[0]


def test_a_fifo_or_directory_at_the_artifact_path_is_refused_promptly(tmp_path: Path) -> None:
    """Something planted at the artifact path that is not a regular file is refused at once, never waited on."""
    root = tmp_path / "root"
    ref = artifacts.write_artifact(root, "browser", b"picture", "png")
    digest, sub, ext = artifacts.parse_ref(ref)
    target = root / sub / f"{digest}.{ext}"
    target.unlink()
    os.mkfifo(target, 0o600)
    got = _resolve_in_thread(root, ref, target)
    assert got is not None, "resolve_artifact blocked opening a FIFO"
    assert isinstance(got, artifacts.ArtifactError) and got.code == "artifact_not_a_file"

    target.unlink()
    target.mkdir()
    with pytest.raises(artifacts.ArtifactError) as info:
        artifacts.resolve_artifact(root, ref, 1024)
    assert info.value.code == "artifact_not_a_file"
