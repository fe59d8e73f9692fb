"""clankie.version: the commit a checkout has out, read from its .git as files, in each shape git leaves it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from clankie.version import MAX_READ, UNKNOWN, revision, revision_of

SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"


def test_a_loose_ref_a_packed_ref_and_a_detached_head(tmp_path: Path) -> None:
    git = tmp_path / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    assert revision_of(tmp_path) == UNKNOWN  # a branch with no commit yet
    (git / "packed-refs").write_text(f"# pack-refs with: peeled\n{OTHER} refs/heads/other\n{SHA} refs/heads/main\n")
    assert revision_of(tmp_path) == SHA
    (git / "refs" / "heads" / "main").write_text(OTHER + "\n")  # a loose ref wins over the packed one
    assert revision_of(tmp_path) == OTHER
    (git / "HEAD").write_text(SHA + "\n")
    assert revision_of(tmp_path) == SHA


def test_a_worktree_reads_its_head_and_the_common_refs(tmp_path: Path) -> None:
    main, tree = tmp_path / "main", tmp_path / "wt"
    common = main / ".git"
    own = common / "worktrees" / "wt"
    (common / "refs" / "heads").mkdir(parents=True)
    own.mkdir(parents=True)
    tree.mkdir()
    (tree / ".git").write_text(f"gitdir: {own}\n")
    (own / "commondir").write_text("../..\n")
    (own / "HEAD").write_text("ref: refs/heads/night\n")
    (common / "refs" / "heads" / "night").write_text(SHA + "\n")
    assert revision_of(tree) == SHA


def test_no_checkout_a_strange_head_or_a_ref_outside_git_is_unknown(tmp_path: Path) -> None:
    assert revision_of(tmp_path) == UNKNOWN
    git = tmp_path / ".git"
    git.mkdir()
    (git / "HEAD").write_text("ref: ../../../etc/passwd\n")
    assert revision_of(tmp_path) == UNKNOWN
    (git / "HEAD").write_text("x" * (2 * MAX_READ))  # read up to the bound, then judged: not a commit
    assert revision_of(tmp_path) == UNKNOWN


def test_this_checkout_reads_as_git_itself_says() -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    if done.returncode == 0:  # a checkout (a source tarball has no .git: unknown is then right)
        assert revision() == done.stdout.strip()
