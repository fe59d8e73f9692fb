"""Where clankiectl looks for control.sock when no --socket is given (issue 14 item 6)."""

from __future__ import annotations

import socket
from pathlib import Path

from supervisor.ctl import default_socket


def listening(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.listen(1)
    return s


def test_the_units_runtime_dir_is_found_with_no_variable(tmp_path: Path) -> None:
    """No CLANKIE_RUNTIME_DIR, no RUNTIME_DIRECTORY, nothing at the per-user default: /run/clankie is used."""
    unit = tmp_path / "run-clankie"
    unit.mkdir()
    with listening(unit / "control.sock"):
        env = {"HOME": str(tmp_path / "home")}
        assert default_socket(env, system_dir=unit) == unit / "control.sock"


def test_an_explicit_variable_or_a_live_per_user_supervisor_wins(tmp_path: Path) -> None:
    """The unit's directory is only the fallback: what the operator set, or a supervisor of their own, comes first."""
    unit, own = tmp_path / "unit", tmp_path / "own"
    unit.mkdir()
    own.mkdir()
    with listening(unit / "control.sock"):
        assert default_socket({"CLANKIE_RUNTIME_DIR": str(own)}, system_dir=unit) == own / "control.sock"
        xdg = tmp_path / "xdg"
        (xdg / "clankie").mkdir(parents=True)
        with listening(xdg / "clankie" / "control.sock"):
            assert default_socket({"XDG_RUNTIME_DIR": str(xdg)}, system_dir=unit) == xdg / "clankie" / "control.sock"


def test_with_nothing_running_anywhere_the_per_user_path_is_reported(tmp_path: Path) -> None:
    """The "not running (no …)" message names the path the operator's own settings point at."""
    env = {"CLANKIE_STATE": str(tmp_path / "state")}
    assert default_socket(env, system_dir=tmp_path / "nothing") == tmp_path / "state" / "run" / "control.sock"
