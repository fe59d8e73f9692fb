"""Settings and the one attachment-root resolver (upstream §7.1 plus the seed's defaults)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clankie import directories, settings
from clankie.errors import ConfigError


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"CLANKIE_STATE": "/var/clankie"}, "/var/clankie/attachments"),
        ({"HOME": "/home/op"}, "/home/op/.clankie/attachments"),
        ({"CLANKIE_DISCORD_ATTACHMENT_ROOT": "  /srv/art  "}, "/srv/art"),
        ({"CLANKIE_DISCORD_ATTACHMENT_ROOT": "   ", "CLANKIE_STATE": "/s"}, "/s/attachments"),
        ({"CLANKIE_DISCORD_ATTACHMENT_ROOT": "", "CLANKIE_STATE": "/s"}, "/s/attachments"),
        ({"CLANKIE_DISCORD_ATTACHMENT_ROOT": "\t\n", "CLANKIE_STATE": " /s "}, "/s/attachments"),
        ({"STATE_DIRECTORY": "/var/lib/clankie"}, "/var/lib/clankie/attachments"),
        ({"STATE_DIRECTORY": "/var/lib/a:/var/lib/b"}, "/var/lib/a/attachments"),
        ({"STATE_DIRECTORY": "/var/lib/x", "CLANKIE_STATE": "/explicit"}, "/explicit/attachments"),
    ],
)
def test_attachment_root_derivations(env: dict[str, str], expected: str) -> None:
    """The root is the trimmed override if set, else <state>/attachments."""
    assert directories.discord_attachment_root(env) == Path(expected)


def test_attachment_root_is_stable_across_environment_copies() -> None:
    """Two processes with copies of one environment read one root."""
    env = {"CLANKIE_STATE": "/var/clankie"}
    assert directories.discord_attachment_root(dict(env)) == directories.discord_attachment_root(dict(env))


def test_relative_values_become_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative override or state dir is resolved against the current directory, once."""
    monkeypatch.chdir(tmp_path)
    assert directories.discord_attachment_root({"CLANKIE_DISCORD_ATTACHMENT_ROOT": "art"}) == tmp_path / "art"
    assert directories.discord_attachment_root({"CLANKIE_STATE": "st"}) == tmp_path / "st" / "attachments"


def test_attachment_root_never_raises_without_any_variables() -> None:
    """An empty environment still yields an absolute root."""
    root = directories.discord_attachment_root({})
    assert root.is_absolute()
    assert root.name == "attachments"


def test_the_process_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no mapping given, the resolver reads this process's environment."""
    monkeypatch.setenv("CLANKIE_DISCORD_ATTACHMENT_ROOT", "/from/env")
    assert directories.discord_attachment_root() == Path("/from/env")


def test_children_get_the_absolute_root_the_supervisor_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor hands children absolute paths, so a child in another cwd reads the same root."""
    monkeypatch.chdir(tmp_path)
    parent = settings.load({"CLANKIE_DISCORD_ATTACHMENT_ROOT": "rel", "HOME": str(tmp_path)})
    child_env = settings.child_environment(parent, {"HOME": str(tmp_path)})
    monkeypatch.chdir("/")
    assert directories.discord_attachment_root(child_env) == parent.attachment_root == tmp_path / "rel"


def test_runtime_dir_preference_order() -> None:
    """CLANKIE_RUNTIME_DIR, then systemd's, then XDG's, then <state>/run."""
    assert directories.runtime_dir({"CLANKIE_RUNTIME_DIR": "/r", "RUNTIME_DIRECTORY": "/x"}) == Path("/r")
    assert directories.runtime_dir({"RUNTIME_DIRECTORY": "/run/clankie"}) == Path("/run/clankie")
    assert directories.runtime_dir({"XDG_RUNTIME_DIR": "/run/user/1000"}) == Path("/run/user/1000/clankie")
    assert directories.runtime_dir({"CLANKIE_STATE": "/s"}) == Path("/s/run")


def test_defaults_load_from_an_empty_environment() -> None:
    """Embedded defaults are enough to start."""
    s = settings.load({"HOME": "/home/op"})
    assert s.discord_dm_policy == "owner_only"
    assert s.discord_reply_policy == "all"
    assert s.discord_guild_ids == ()
    assert s.stall_seconds == 300 and s.stall_tick_seconds == 5
    assert s.discord_token is None and s.anthropic_api_key is None
    assert s.poison_runs == 3


def test_comma_lists_are_split_and_trimmed() -> None:
    """Id lists are comma-separated with blanks ignored."""
    s = settings.load({"CLANKIE_DISCORD_GUILD_IDS": " 1, 22 ,,333 ", "HOME": "/h"})
    assert s.discord_guild_ids == ("1", "22", "333")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CLANKIE_DISCORD_DM_POLICY", "everyone"),
        ("CLANKIE_DISCORD_CONTEXT_MESSAGES", "51"),
        ("CLANKIE_STALL_SECONDS", "soon"),
        ("CLANKIE_DISCORD_GUILD_IDS", "12,abc"),
        ("CLANKIE_BROWSER_ALLOW_PRIVATE", "perhaps"),
        ("CLANKIE_POISON_RUNS", "0"),
        ("CLANKIE_POISON_RUNS", "three"),
        ("CLANKIE_DELIVERY_MAX_RETAINED", "99"),
        ("CLANKIE_STALL_SECONDS", "inf"),
        ("CLANKIE_STALL_SECONDS", "nan"),
        ("CLANKIE_STALL_TICK_SECONDS", "-inf"),
        ("CLANKIE_STALL_ABORT_GRACE_SECONDS", "NaN"),
        ("CLANKIE_HEARTBEAT_SECONDS", "inf"),
        ("CLANKIE_HEARTBEAT_TIMEOUT_SECONDS", "nan"),
        ("CLANKIE_HEARTBEAT_TIMEOUT_SECONDS", "1e300"),
        ("CLANKIE_DISCORD_CATCH_UP_SECONDS", "inf"),
        ("CLANKIE_CONTROL_IDLE_SECONDS", "inf"),
        ("CLANKIE_IPC_HELLO_SECONDS", "0"),
        ("CLANKIE_DISCORD_API_BASE", "not a url"),
        ("CLANKIE_DISCORD_API_BASE", "ftp://127.0.0.1/api/v10"),
        ("CLANKIE_DISCORD_API_BASE", "http://127.0.0.1:99999/api/v10"),
        ("CLANKIE_DISCORD_API_BASE", "http://127.0.0.1:8080"),
        ("CLANKIE_DISCORD_API_BASE", "http:///api/v10"),
        ("CLANKIE_DISCORD_API_BASE", "http://127.0.0.1:8080/api/v10?x=1"),
        ("ANTHROPIC_BASE_URL", "127.0.0.1:8080"),
    ],
)
def test_bad_values_are_a_config_error_naming_the_setting(name: str, value: str) -> None:
    """A bad value stops the process with a message that names the variable, not a traceback."""
    with pytest.raises(ConfigError) as info:
        settings.load({name: value, "HOME": "/h"})
    assert name in str(info.value)


def test_a_good_discord_api_base_is_kept_without_a_trailing_slash() -> None:
    """The documented shape (REST base including /api/v10) loads, normalised."""
    got = settings.load({"CLANKIE_DISCORD_API_BASE": "http://127.0.0.1:8080/api/v10/", "HOME": "/h"})
    assert got.discord_api_base == "http://127.0.0.1:8080/api/v10"


def test_a_heartbeat_no_faster_than_its_timeout_is_refused_naming_both() -> None:
    """Children beating slower than the supervisor's timeout would be killed forever: one line names both settings."""
    with pytest.raises(ConfigError) as info:
        settings.load({"CLANKIE_HEARTBEAT_SECONDS": "30", "CLANKIE_HEARTBEAT_TIMEOUT_SECONDS": "20", "HOME": "/h"})
    text = str(info.value)
    assert "CLANKIE_HEARTBEAT_SECONDS" in text and "CLANKIE_HEARTBEAT_TIMEOUT_SECONDS" in text and "\n" not in text


def test_secrets_come_from_the_credentials_directory(tmp_path: Path) -> None:
    """systemd LoadCredential= files are read when the variable is not set."""
    (tmp_path / "discord_token").write_text("tok-from-file\n")
    (tmp_path / "anthropic_api_key").write_text("key-from-file")
    s = settings.load({"CREDENTIALS_DIRECTORY": str(tmp_path), "HOME": "/h"})
    assert s.discord_token is not None and s.discord_token.get_secret_value() == "tok-from-file"
    assert s.anthropic_api_key is not None and s.anthropic_api_key.get_secret_value() == "key-from-file"
    s2 = settings.load({"CREDENTIALS_DIRECTORY": str(tmp_path), "DISCORD_TOKEN": "env-wins", "HOME": "/h"})
    assert s2.discord_token is not None and s2.discord_token.get_secret_value() == "env-wins"


def test_secrets_never_show_in_the_settings_repr() -> None:
    """Printing settings does not leak a token."""
    s = settings.load({"DISCORD_TOKEN": "very-secret-token", "HOME": "/h"})
    assert "very-secret-token" not in repr(s)


def test_load_does_not_read_the_process_environment_when_given_a_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mapping handed to load() is the only input."""
    monkeypatch.setenv("CLANKIE_DISCORD_DM_POLICY", "deny")
    assert settings.load({"HOME": "/h"}).discord_dm_policy == "owner_only"
    assert os.environ["CLANKIE_DISCORD_DM_POLICY"] == "deny"


def test_poison_runs_is_read_and_a_bad_one_is_one_line() -> None:
    """CLANKIE_POISON_RUNS sets how many crashed runs make a poison message; 0 is refused in one line."""
    assert settings.load({"CLANKIE_POISON_RUNS": "1", "HOME": "/h"}).poison_runs == 1
    with pytest.raises(ConfigError) as info:
        settings.load({"CLANKIE_POISON_RUNS": "0", "HOME": "/h"})
    assert "\n" not in str(info.value) and str(info.value).startswith("invalid settings: CLANKIE_POISON_RUNS:")


def test_delivery_max_retained_is_read_and_a_bad_one_is_one_line() -> None:
    """CLANKIE_DELIVERY_MAX_RETAINED caps the retained delivery records (default 100000); under 100 is one line."""
    assert settings.load({"HOME": "/h"}).delivery_max_retained == 100_000
    assert settings.load({"CLANKIE_DELIVERY_MAX_RETAINED": "100", "HOME": "/h"}).delivery_max_retained == 100
    with pytest.raises(ConfigError) as info:
        settings.load({"CLANKIE_DELIVERY_MAX_RETAINED": "99", "HOME": "/h"})
    assert "\n" not in str(info.value) and str(info.value).startswith("invalid settings: CLANKIE_DELIVERY_MAX_RETAINED:")


def test_demo_mode_drops_the_discord_token_and_refuses_a_real_key(tmp_path: Path) -> None:
    """Demo mode never holds a Discord token, and a real key (environment or credential) stops it in one line."""
    s = settings.load({"CLANKIE_DEMO": "1", "DISCORD_TOKEN": "tok", "HOME": "/h"})
    assert s.demo and s.discord_token is None
    assert settings.load({"DISCORD_TOKEN": "tok", "HOME": "/h"}).discord_token is not None
    (tmp_path / "anthropic_api_key").write_text("sk-from-credential\n")
    for env in ({"ANTHROPIC_API_KEY": "sk-env"}, {"CREDENTIALS_DIRECTORY": str(tmp_path)}):
        with pytest.raises(ConfigError, match="demo mode refuses") as caught:
            settings.load({"CLANKIE_DEMO": "1", "HOME": "/h", **env})
        assert "\n" not in str(caught.value) and "sk-" not in str(caught.value)


def test_demo_mode_keeps_a_token_only_for_a_discord_stand_in_on_loopback() -> None:
    """A token survives demo mode only when the Discord API base is a loopback address (a local stand-in such as
    clankie.testing.fake_discord); discord.com, another address or a name (even localhost) drops it."""
    def token(base: str) -> bool:
        env = {"CLANKIE_DEMO": "1", "DISCORD_TOKEN": "tok", "HOME": "/h", "CLANKIE_DISCORD_API_BASE": base}
        return settings.load(env).discord_token is not None

    assert token("http://127.0.0.1:8080/api/v10") and token("http://[::1]:8080/api/v10")
    assert token("http://127.9.9.9:1/api/v10")
    for base in ("https://discord.com/api/v10", "http://localhost:8080/api/v10", "http://10.0.0.1:8080/api/v10",
                 "http://[::ffff:127.0.0.1]:8080/api/v10", "http://127.0.0.1.nip.io/api/v10"):
        assert not token(base), base


def test_the_room_settings_default_on_and_an_empty_reaction_disables_it() -> None:
    """The failure reaction defaults to ⚠️ and the tool card to on; setting the reaction empty turns it off."""
    s = settings.load({"HOME": "/h"})
    assert (s.discord_failure_reaction, s.discord_tool_card) == ("\u26a0\ufe0f", True)
    off = settings.load({"HOME": "/h", "CLANKIE_DISCORD_FAILURE_REACTION": " ", "CLANKIE_DISCORD_TOOL_CARD": "false"})
    assert (off.discord_failure_reaction, off.discord_tool_card) == ("", False)
