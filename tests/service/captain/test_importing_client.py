"""The service's client of a browser host in its own unit: every picture verified by hash, then copied under our root."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from clankie.artifacts import resolve_artifact, write_artifact
from clankie.clock import SystemClock
from clankie.errors import RemoteError
from clankie.protocol import Artifact
from service.captain.tools.hosts import ImportingClient

PNG = b"\x89PNG\r\n\x1a\n a picture the browser host wrote"


def client(tmp_path: Path, max_bytes: int = 1 << 20) -> ImportingClient:
    return ImportingClient("browser", tmp_path / "browser.sock", SystemClock(), source=tmp_path / "unit",
                           root=tmp_path / "attachments", max_bytes=max_bytes)


def written(tmp_path: Path, data: bytes = PNG) -> Artifact:
    ref = write_artifact(tmp_path / "unit", "browser", data, "png")
    return Artifact(ref=ref, sha256=hashlib.sha256(data).hexdigest(), size=len(data), mime="image/png")


def test_a_picture_is_copied_under_our_root_by_the_same_ref(tmp_path: Path) -> None:
    art = written(tmp_path)
    client(tmp_path).import_artifact(art)
    assert resolve_artifact(tmp_path / "attachments", art.ref, 1 << 20).data == PNG


def test_a_picture_whose_bytes_do_not_match_its_hash_is_refused_and_nothing_is_copied(tmp_path: Path) -> None:
    art = written(tmp_path)
    (tmp_path / "unit" / "browser" / f"{art.sha256}.png").write_bytes(PNG + b" and something else")
    with pytest.raises(RemoteError) as info:
        client(tmp_path).import_artifact(art)
    assert info.value.code == "artifact_hash_mismatch"
    assert not (tmp_path / "attachments" / "browser" / f"{art.sha256}.png").exists()


def test_a_record_that_names_another_hash_than_its_ref_is_refused(tmp_path: Path) -> None:
    art = written(tmp_path).model_copy(update={"sha256": "0" * 64})
    with pytest.raises(RemoteError) as info:
        client(tmp_path).import_artifact(art)
    assert info.value.code == "artifact_hash_mismatch"


def _gone(art: Artifact, unit: Path) -> None:
    os.unlink(unit / "browser" / f"{art.sha256}.png")


def _outside(art: Artifact, unit: Path) -> None:
    picture = unit / "browser" / f"{art.sha256}.png"
    picture.unlink()
    picture.symlink_to("/etc/hostname")


@pytest.mark.parametrize(("arrange", "code"), [(_gone, "artifact_missing"), (_outside, "artifact_outside_root")])
def test_a_picture_that_is_gone_or_points_outside_the_units_directory_is_refused(
    tmp_path: Path, arrange: Callable[[Artifact, Path], None], code: str
) -> None:
    art = written(tmp_path)
    arrange(art, tmp_path / "unit")
    with pytest.raises(RemoteError) as info:
        client(tmp_path).import_artifact(art)
    assert info.value.code == code


def test_a_picture_over_the_upload_limit_is_refused(tmp_path: Path) -> None:
    art = written(tmp_path)
    with pytest.raises(RemoteError) as info:
        client(tmp_path, max_bytes=len(PNG) - 1).import_artifact(art)
    assert info.value.code == "artifact_too_large"


def test_a_ref_outside_the_governed_grammar_is_refused_before_any_file_is_touched(tmp_path: Path) -> None:
    art = written(tmp_path).model_copy(update={"ref": "sha256:../../etc/passwd"})
    with pytest.raises(RemoteError) as info:
        client(tmp_path).import_artifact(art)
    assert info.value.code == "artifact_ref_invalid"
    assert not (tmp_path / "attachments").exists()


def test_every_extra_ref_is_verified_and_copied_too(tmp_path: Path) -> None:
    """What a host that answers more than one file per artifact (tldraw's SVG and .tldr) would need."""
    extra = write_artifact(tmp_path / "unit", "browser", b"<svg/>", "svg")
    art = written(tmp_path).model_copy(update={"extra_refs": (extra,)})
    client(tmp_path).import_artifact(art)
    assert resolve_artifact(tmp_path / "attachments", extra, 1 << 20).data == b"<svg/>"
