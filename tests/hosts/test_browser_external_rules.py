"""The browser host outside the tree, its parts one by one: the rule by uid, the handed socket, the shared directory."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from clankie.artifacts import resolve_artifact
from clankie.errors import ConfigError
from clankie.protocol import Code
from hosts.browser.external import ClientUid, SharedArtifacts, client_uid, open_shared_dir, systemd_listener


def test_the_rule_admits_its_one_uid_and_refuses_every_other_naming_both() -> None:
    rule = ClientUid(uid=1000)
    assert rule.admit(pid=77, uid=1000) is None
    for other in (0, 999, 1001, 65534):  # root too: the unit boundary is about the tree's uid, not privilege
        refusal = rule.admit(pid=77, uid=other)
        assert refusal is not None and refusal.code == Code.PEER_UID_REFUSED
        assert refusal.reason == f"pid 77 runs as uid {other}; this browser host serves uid 1000 only"


def test_the_client_uid_is_a_uid_a_name_or_blank_for_the_uid_that_started_the_host() -> None:
    assert client_uid("", starting_uid=1234) == 1234
    assert client_uid("  ", starting_uid=1234) == 1234
    assert client_uid("4242", starting_uid=0) == 4242
    assert client_uid("root", starting_uid=1234) == 0
    with pytest.raises(ConfigError, match="CLANKIE_BROWSER_CLIENT_UID: there is no user 'no-such-user-here'"):
        client_uid("no-such-user-here", starting_uid=0)


def test_a_handed_socket_is_taken_only_when_listen_pid_is_this_process() -> None:
    assert systemd_listener({}) is None
    assert systemd_listener({"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "1"}) is None
    assert systemd_listener({"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "0"}) is None
    assert systemd_listener({"LISTEN_PID": "self", "LISTEN_FDS": "1"}) is None


def test_a_handed_fd_3_that_is_not_a_listening_socket_is_a_configuration_error(tmp_path: Path) -> None:
    """What systemd would hand for a ListenDatagram= or a FIFO: refused (exit 78), never served."""
    saved = os.dup(3) if _open(3) else None
    a, b = socket.socketpair()  # connected, not listening
    try:
        os.dup2(a.fileno(), 3)
        with pytest.raises(ConfigError, match="not a listening Unix stream socket"):
            systemd_listener({"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "1"})
    finally:
        a.close()
        b.close()
        if saved is not None:
            os.dup2(saved, 3)
            os.close(saved)
        else:
            os.close(3)


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_the_shared_directory_is_enterable_not_listable_and_its_pictures_are_readable(tmp_path: Path) -> None:
    root = tmp_path / "artifacts"
    shared = SharedArtifacts(open_shared_dir(root), keep=8)
    try:
        ref = shared.write(b"\x89PNG one picture", "png")
    finally:
        os.close(shared.directory)
    assert stat.S_IMODE(root.stat().st_mode) == 0o711
    assert stat.S_IMODE((root / "browser").stat().st_mode) == 0o711
    resolved = resolve_artifact(root, ref, 1024)
    assert resolved.data == b"\x89PNG one picture"
    assert stat.S_IMODE(resolved.path.stat().st_mode) == 0o644


def test_the_shared_directory_keeps_the_newest_keep_pictures_and_no_more(tmp_path: Path) -> None:
    """At the bound nothing goes; one past it, the oldest goes; the same picture again counts as the newest."""
    shared = SharedArtifacts(open_shared_dir(tmp_path / "artifacts"), keep=4)
    directory = tmp_path / "artifacts" / "browser"
    try:
        refs = [shared.write(f"picture {i}".encode(), "png") for i in range(4)]
        for i, ref in enumerate(refs):  # distinct, ordered mtimes whatever the file system's resolution
            digest = ref.split(":")[1]
            os.utime(directory / f"{digest}.png", ns=(i * 10**9, i * 10**9))
        assert len(os.listdir(directory)) == 4 and shared.pruned == 0
        shared.write(b"picture 0", "png")  # again: now the newest, so picture 1 is the oldest
        shared.write(b"picture 4", "png")
        names = sorted(os.listdir(directory))
    finally:
        os.close(shared.directory)
    assert len(names) == 4 and shared.pruned == 1
    assert f"{refs[1].split(':')[1]}.png" not in names
    assert f"{refs[0].split(':')[1]}.png" in names


def test_a_shared_directory_others_may_write_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    root = tmp_path / "artifacts"
    root.mkdir()
    root.chmod(0o777)
    with pytest.raises(ConfigError, match="group or others may write it"):
        open_shared_dir(root)
    assert stat.S_IMODE(root.stat().st_mode) == 0o777 and not (root / "browser").exists()


def test_a_shared_directory_another_uid_cannot_enter_is_used_but_named_in_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A tree of the same uid still reads it; a tree of another uid would not, and the log says how to fix it."""
    root = tmp_path / "artifacts"
    root.mkdir(mode=0o700)
    with caplog.at_level("WARNING", logger="hosts.browser.external"):
        os.close(open_shared_dir(root))
    assert [r.getMessage() for r in caplog.records] == [
        f"{root} is 0700: a tree of another uid cannot enter it to read the screenshots (make it 0711)"]
    assert stat.S_IMODE(root.stat().st_mode) == 0o700  # not ours to chmod: the operator (or systemd) made it
