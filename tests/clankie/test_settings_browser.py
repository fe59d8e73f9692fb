"""The settings of the browser host in its own unit (docs/operations.md, "The browser in its own unit")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clankie import settings
from clankie.errors import EX_CONFIG, ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_the_browser_host_is_a_child_of_the_tree_unless_told_otherwise() -> None:
    s = settings.load({"HOME": "/h"})
    assert s.browser_host == "child"
    assert s.browser_socket == Path("/run/clankie-browser/browser.sock")
    assert s.browser_artifacts == Path("/run/clankie-browser/artifacts")
    assert (s.browser_client_uid, s.browser_artifacts_keep) == ("", 64)


def test_the_external_mode_and_its_paths_are_read_as_set() -> None:
    s = settings.load({"HOME": "/h", "CLANKIE_BROWSER_HOST": "external", "CLANKIE_BROWSER_SOCKET": "/srv/b/b.sock",
                       "CLANKIE_BROWSER_ARTIFACTS": "/srv/b/art", "CLANKIE_BROWSER_CLIENT_UID": " clankie ",
                       "CLANKIE_BROWSER_ARTIFACTS_KEEP": "4"})
    assert (s.browser_host, s.browser_socket, s.browser_artifacts) == ("external", Path("/srv/b/b.sock"), Path("/srv/b/art"))
    assert (s.browser_client_uid, s.browser_artifacts_keep) == ("clankie", 4)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"CLANKIE_BROWSER_HOST": "sidecar"}, "CLANKIE_BROWSER_HOST: Input should be 'child' or 'external'"),
        ({"CLANKIE_BROWSER_SOCKET": "run/browser.sock"}, "CLANKIE_BROWSER_SOCKET: must be an absolute path"),
        ({"CLANKIE_BROWSER_ARTIFACTS": "art"}, "CLANKIE_BROWSER_ARTIFACTS: must be an absolute path"),
        ({"CLANKIE_BROWSER_CLIENT_UID": "two words"}, "CLANKIE_BROWSER_CLIENT_UID: must be a user name or a numeric uid"),
        ({"CLANKIE_BROWSER_CLIENT_UID": "-1"}, "CLANKIE_BROWSER_CLIENT_UID: must be a user name or a numeric uid"),
        ({"CLANKIE_BROWSER_ARTIFACTS_KEEP": "3"}, "CLANKIE_BROWSER_ARTIFACTS_KEEP"),
    ],
)
def test_a_bad_value_is_one_line_naming_it(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError) as info:
        settings.load({"HOME": "/h", **env})
    assert "\n" not in str(info.value) and says in str(info.value)


@pytest.mark.parametrize("command", [("-m", "hosts.browser"), ("-m", "supervisor", "run")])
def test_a_bad_browser_host_setting_stops_the_host_and_the_tree_with_one_line_and_exit_78(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path), "CLANKIE_STATE": str(tmp_path / "s"),
           "CLANKIE_RUNTIME_DIR": str(tmp_path / "r"), "CLANKIE_BROWSER_HOST": "sidecar"}
    done = subprocess.run([sys.executable, *command], env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == EX_CONFIG, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "CLANKIE_BROWSER_HOST: Input should be 'child' or 'external'" in lines[0], done.stderr
