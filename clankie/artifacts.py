"""Governed artifacts: one ref grammar, one writer, one resolver (ARCHITECTURE §6).

Hosts write ``<root>/<sub>/<sha256hex>.<ext>`` and hand out the ref
``sha256:<hex>:<sub>/<hex>.<ext>``. The bridge resolves a ref back to bytes
under the same root, which both sides get from
:func:`clankie.directories.discord_attachment_root`. A ref that does not match
the grammar is refused before any file is touched; a resolved path must stay
inside the root after symlinks are followed, fit the size limit, and hash to
the ref's digest.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from clankie.errors import ClankieError
from clankie.paths import ensure_private_dir
from clankie.protocol import Code

SUBDIRS = ("browser", "tldraw", "generated")
EXTENSIONS = {"png": "image/png", "jpg": "image/jpeg", "webp": "image/webp", "svg": "image/svg+xml", "tldr": "application/json"}
REF_RE = re.compile(r"^sha256:([0-9a-f]{64}):(browser|tldraw|generated)/([0-9a-f]{64})\.(png|jpg|webp|svg|tldr)$")


class ArtifactError(ClankieError):
    """Raised when a ref cannot be turned into deliverable bytes; ``code`` says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Resolved:
    path: Path
    data: bytes
    filename: str
    content_type: str


def make_ref(sub: str, digest: str, ext: str) -> str:
    return f"sha256:{digest}:{sub}/{digest}.{ext}"


def parse_ref(ref: str) -> tuple[str, str, str]:
    """Return ``(digest, sub, ext)`` or raise ``artifact_ref_invalid``."""
    match = REF_RE.match(ref) if isinstance(ref, str) else None
    if match is None or match.group(1) != match.group(3):
        raise ArtifactError(Code.ARTIFACT_REF_INVALID, "artifact ref does not match the governed grammar")
    return match.group(1), match.group(2), match.group(4)


def write_artifact(root: Path, sub: str, data: bytes, ext: str) -> str:
    """Write ``data`` under the root (dirs 0700, file 0600, atomically) and return its ref.

    Raises :class:`ConfigError` if the root or its subdirectory exists but is
    not private to us, and ``OSError`` if the write fails (a full disk).
    """
    if sub not in SUBDIRS or ext not in EXTENSIONS:
        raise ValueError(f"unsupported artifact {sub}/{ext}")
    ensure_private_dir(root)  # refuses (ConfigError) a root that is not ours and private; never chmods it
    directory = os.open(ensure_private_dir(root / sub), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return write_into(directory, sub, data, ext)
    finally:
        os.close(directory)


def write_into(directory: int, sub: str, data: bytes, ext: str) -> str:
    """Write ``data`` atomically into the open ``<root>/<sub>`` directory ``directory`` and return its ref.

    The browser host apart (:mod:`hosts.browser.apart`) writes this way: its
    user owns ``<root>/browser`` but may not be able to walk the path to it.
    """
    if sub not in SUBDIRS or ext not in EXTENSIONS:
        raise ValueError(f"unsupported artifact {sub}/{ext}")
    digest = hashlib.sha256(data).hexdigest()
    final = f"{digest}.{ext}"
    tmp = f".{digest}.{os.getpid()}.{os.urandom(4).hex()}.tmp"  # its own: the same bytes may be written twice at once
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600, dir_fd=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, final, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=directory)
        raise
    return make_ref(sub, digest, ext)


def resolve_artifact(root: Path, ref: str, max_bytes: int) -> Resolved:
    """Turn a governed ref into bytes, or raise :class:`ArtifactError` with a stable code."""
    digest, sub, ext = parse_ref(ref)
    try:
        real_root = Path(os.path.realpath(root, strict=True))
    except OSError:
        raise ArtifactError(Code.ARTIFACT_ROOT_UNAVAILABLE, "attachment root does not exist") from None
    try:
        real = Path(os.path.realpath(real_root / sub / f"{digest}.{ext}", strict=True))
    except OSError:
        raise ArtifactError(Code.ARTIFACT_MISSING, "artifact file does not exist") from None
    if not real.is_relative_to(real_root):
        raise ArtifactError(Code.ARTIFACT_OUTSIDE_ROOT, "artifact resolves outside the attachment root")
    try:
        # O_NONBLOCK: a FIFO planted at the path must not block the open (nor the caller) forever.
        fd = os.open(real, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        raise ArtifactError(Code.ARTIFACT_MISSING, "artifact file cannot be opened") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ArtifactError(Code.ARTIFACT_NOT_A_FILE, "artifact path is not a regular file")
    with os.fdopen(fd, "rb") as fh:
        size = st.st_size
        if size > max_bytes:
            raise ArtifactError(Code.ARTIFACT_TOO_LARGE, f"artifact is {size} bytes, over the {max_bytes}-byte limit")
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ArtifactError(Code.ARTIFACT_TOO_LARGE, "artifact grew past the upload limit")
    if not hmac.compare_digest(hashlib.sha256(data).hexdigest(), digest):
        raise ArtifactError(Code.ARTIFACT_HASH_MISMATCH, "artifact bytes do not match the ref")
    return Resolved(real, data, f"{sub}-{digest[:12]}.{ext}", EXTENSIONS[ext])
