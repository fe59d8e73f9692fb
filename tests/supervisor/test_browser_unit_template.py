"""The template for the browser host in its own unit: its socket, its service, the tree's drop-in, and systemd's verdict.

The three files must agree with each other and with the settings' defaults
(one socket path, one artifact directory, one user named by the socket's group
and the host's rule), give Chromium's sandbox its allowances in the browser's
unit only, and pass ``systemd-analyze``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clankie.settings_browser import EXTERNAL_ARTIFACTS, EXTERNAL_SOCKET

UNITS = Path(__file__).resolve().parents[2] / "docs" / "systemd"
SOCKET = UNITS / "clankie-browser.socket"
SERVICE = UNITS / "clankie-browser.service"
DROP_IN = UNITS / "clankie.service.d" / "browser-external.conf"
analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")


def directives(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def environment(path: Path) -> dict[str, str]:
    return dict(v.split("=", 1) for v in directives(path).get("Environment", []))


def test_the_socket_the_artifacts_and_the_user_are_one_and_the_same_in_all_three_files() -> None:
    sock, service, drop_in = directives(SOCKET), directives(SERVICE), directives(DROP_IN)
    host, tree = environment(SERVICE), environment(DROP_IN)
    assert sock["ListenStream"] == [host["CLANKIE_BROWSER_SOCKET"]] == [tree["CLANKIE_BROWSER_SOCKET"]] == [str(EXTERNAL_SOCKET)]
    assert host["CLANKIE_BROWSER_ARTIFACTS"] == tree["CLANKIE_BROWSER_ARTIFACTS"] == str(EXTERNAL_ARTIFACTS)
    assert ["/run/" + d for d in service["RuntimeDirectory"]] == [str(EXTERNAL_ARTIFACTS)]
    assert (host["CLANKIE_BROWSER_HOST"], tree["CLANKIE_BROWSER_HOST"]) == ("external", "external")
    assert sock["SocketGroup"] == [host["CLANKIE_BROWSER_CLIENT_UID"]] == drop_in["User"] == drop_in["Group"] == ["clankie"]
    assert "u clankie " in (UNITS / "clankie.sysusers").read_text()


def test_only_root_and_the_trees_group_may_connect_and_the_pictures_dir_cannot_be_listed() -> None:
    sock, service = directives(SOCKET), directives(SERVICE)
    assert (sock["SocketUser"], sock["SocketMode"], sock["Accept"]) == (["root"], ["0660"], ["no"])
    assert service["RuntimeDirectoryMode"] == ["0711"]


def test_the_browser_runs_as_a_user_of_its_own_that_sees_the_trees_real_uid() -> None:
    service = directives(SERVICE)
    assert service["DynamicUser"] == ["yes"] and service["PrivateUsers"] == ["no"]
    assert service["Requires"] == ["clankie-browser.socket"] and service["RestartPreventExitStatus"] == ["78"]
    assert service["CapabilityBoundingSet"] == [""] and service["NoNewPrivileges"] == ["yes"]
    assert "User" not in service and "LoadCredential" not in service and "SetCredential" not in service  # no secret


def test_chromiums_allowances_move_to_the_browser_unit_and_the_tree_keeps_none_of_them() -> None:
    service, drop_in = directives(SERVICE), directives(DROP_IN)
    assert service["RestrictNamespaces"] == ["user pid net"]
    assert service["SystemCallFilter"] == ["@system-service", "~@privileged @resources", "capset chroot"]
    assert "AF_NETLINK" in service["RestrictAddressFamilies"][0]
    assert drop_in["RestrictNamespaces"] == ["yes"]
    assert drop_in["SystemCallFilter"] == ["", "@system-service", "~@privileged @resources"]  # reset, then without
    assert drop_in["RestrictAddressFamilies"] == ["", "AF_UNIX AF_INET AF_INET6"]
    assert drop_in["Wants"] == drop_in["After"] == ["clankie-browser.socket"]


@analyze
def test_systemd_analyze_verify_accepts_the_socket_the_service_and_the_tree_with_its_drop_in(tmp_path: Path) -> None:
    """Pointed at this checkout's interpreter; the tree's unit with the drop-in appended (what systemd merges)."""
    python, clankie = Path(sys.executable), Path(sys.executable).parent / "clankie"
    (tmp_path / SOCKET.name).write_text(SOCKET.read_text())
    (tmp_path / SERVICE.name).write_text(SERVICE.read_text().replace("/opt/clankie/venv/bin/python", str(python)))
    tree = (UNITS / "clankie.service").read_text().replace("/opt/clankie/venv/bin/clankie", str(clankie))
    (tmp_path / "clankie.service").write_text(tree + DROP_IN.read_text())
    units = [str(tmp_path / name) for name in (SOCKET.name, SERVICE.name, "clankie.service")]
    proc = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True, timeout=60,
                          env={"SYSTEMD_UNIT_PATH": f"{tmp_path}:", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and "clankie" not in proc.stderr, proc.stderr


@analyze
def test_the_browser_unit_exposes_little_by_systemds_own_measure() -> None:
    """2.0 OK offline: what is left is Chromium's sandbox (namespaces, chroot), the network and PrivateUsers=no."""
    proc = subprocess.run(["systemd-analyze", "security", "--offline=true", str(SERVICE)], capture_output=True,
                          text=True, timeout=60)
    found = re.search(r"Overall exposure level for clankie-browser.service: (\d+\.\d+)", proc.stdout)
    assert found is not None, proc.stdout[-500:] + proc.stderr
    assert float(found.group(1)) <= 2.0, proc.stdout


def _exposure(unit: Path) -> float:
    proc = subprocess.run(["systemd-analyze", "security", "--offline=true", str(unit)], capture_output=True,
                          text=True, timeout=60)
    found = re.search(rf"Overall exposure level for {re.escape(unit.name)}: (\d+\.\d+)", proc.stdout)
    assert found is not None, proc.stdout[-500:] + proc.stderr
    return float(found.group(1))


@analyze
def test_the_drop_in_leaves_the_tree_less_exposed_than_its_unit_alone(tmp_path: Path) -> None:
    """With the browser in its own unit the tree needs none of Chromium's allowances, and systemd's own measure
    says so: the tree's unit with the drop-in scores below the same unit alone (1.1 against 1.8 here)."""
    alone, with_drop_in = tmp_path / "alone", tmp_path / "with"
    for d in (alone, with_drop_in):
        d.mkdir()
        (d / "clankie.service").write_text((UNITS / "clankie.service").read_text())
    (with_drop_in / "clankie.service.d").mkdir()
    (with_drop_in / "clankie.service.d" / DROP_IN.name).write_text(DROP_IN.read_text())
    assert _exposure(with_drop_in / "clankie.service") < _exposure(alone / "clankie.service")
