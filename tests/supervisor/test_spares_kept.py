"""``CLANKIE_SPARES``: which default children keep a warm spare (supervisor/spec.py ``spares_kept``).

Pure: the settings are loaded from a mapping, the specs built without a process.
"""

from __future__ import annotations

import pytest

from clankie.errors import ConfigError
from clankie.settings import SPARE_NAMES, load
from supervisor.spec import DEFAULT_CHILDREN, default_specs, spares_kept


def kept(env: dict[str, str]) -> set[str]:
    settings = load(env)
    specs, _missing = default_specs(spares=spares_kept(settings.spares, bridge_spare=settings.bridge_spare))
    return {spec.name for spec in specs if spec.spare}


def test_the_setting_names_exactly_the_default_children() -> None:
    """The settings (clankie, which imports no supervisor module) spell the names out; they are the spec's."""
    assert set(SPARE_NAMES) == {name for name, _module in DEFAULT_CHILDREN}


def test_by_default_every_default_child_keeps_a_spare() -> None:
    assert kept({}) == {"service", "bridge", "browser", "tldraw"}


def test_the_operator_names_the_children_that_keep_one_and_the_others_start_cold() -> None:
    assert kept({"CLANKIE_SPARES": "service, Bridge"}) == {"service", "bridge"}
    assert kept({"CLANKIE_SPARES": "tldraw,tldraw"}) == {"tldraw"}


def test_none_is_no_spare_at_all() -> None:
    assert kept({"CLANKIE_SPARES": "none"}) == set()


def test_the_older_bridge_switch_still_takes_the_bridge_out() -> None:
    assert kept({"CLANKIE_BRIDGE_SPARE": "false"}) == {"service", "browser", "tldraw"}
    assert kept({"CLANKIE_BRIDGE_SPARE": "false", "CLANKIE_SPARES": "bridge"}) == set()


def test_an_external_browser_host_has_no_spare_in_the_tree() -> None:
    specs, _missing = default_specs(browser="external", spares=spares_kept(("browser", "service"), bridge_spare=True))
    assert {spec.name for spec in specs if spec.spare} == {"service"}


@pytest.mark.parametrize("value", ["svc", "service,chromium", "all"])
def test_a_name_that_is_no_default_child_is_a_configuration_error_that_names_the_setting(value: str) -> None:
    with pytest.raises(ConfigError, match="CLANKIE_SPARES"):
        load({"CLANKIE_SPARES": value})
