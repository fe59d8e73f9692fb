"""``CLANKIE_HOSTS``: which hosts the default tree runs (supervisor/spec.py ``default_specs``).

Pure: the settings are loaded from a mapping, the specs built without a process. That a host left out is not offered
to the model is tests/integration/test_service_tools.py's; a real tree without hosts, tests/integration/test_tree_turns.py.
"""

from __future__ import annotations

import pytest

from clankie.errors import ConfigError
from clankie.settings import HOST_NAMES, load
from supervisor.spec import DEFAULT_CHILDREN, HOST_CHILDREN, default_specs, spares_kept


def tree(env: dict[str, str]) -> list[str]:
    settings = load(env)
    specs, _missing = default_specs(browser=settings.browser_host, hosts=settings.hosts,
                                    spares=spares_kept(settings.spares, bridge_spare=settings.bridge_spare))
    return [spec.name for spec in specs]


def test_the_setting_names_exactly_the_hosts_among_the_default_children() -> None:
    """The settings (clankie, which imports no supervisor module) spell the names out; they are the spec's."""
    assert set(HOST_NAMES) == HOST_CHILDREN < {name for name, _module in DEFAULT_CHILDREN}


def test_by_default_the_tree_runs_both_hosts_before_the_service_and_the_bridge() -> None:
    assert tree({}) == ["browser", "tldraw", "service", "bridge"]


def test_the_operator_names_the_hosts_to_run_and_the_others_are_not_started_at_all() -> None:
    assert tree({"CLANKIE_HOSTS": "tldraw"}) == ["tldraw", "service", "bridge"]
    assert tree({"CLANKIE_HOSTS": " Browser , browser"}) == ["browser", "service", "bridge"]


def test_none_is_a_tree_of_the_service_and_the_bridge_and_no_spare_is_kept_for_a_host_not_run() -> None:
    assert tree({"CLANKIE_HOSTS": "none"}) == ["service", "bridge"]
    settings = load({"CLANKIE_HOSTS": "none", "CLANKIE_SPARES": "browser,tldraw,service"})
    specs, _missing = default_specs(hosts=settings.hosts, spares=spares_kept(settings.spares, bridge_spare=True))
    assert [spec.name for spec in specs if spec.spare] == ["service"]


def test_an_external_browser_host_is_still_dialled_not_run_when_the_browser_is_named() -> None:
    assert tree({"CLANKIE_BROWSER_HOST": "external"}) == ["tldraw", "service", "bridge"]
    assert load({"CLANKIE_BROWSER_HOST": "external"}).external_browser
    assert not load({"CLANKIE_BROWSER_HOST": "external", "CLANKIE_HOSTS": "tldraw"}).external_browser  # dialled by none
    assert not load({}).external_browser  # a child of the tree


@pytest.mark.parametrize("value", ["service", "browser,chromium", "all"])
def test_a_name_that_is_no_host_is_a_configuration_error_that_names_the_setting(value: str) -> None:
    with pytest.raises(ConfigError, match="CLANKIE_HOSTS"):
        load({"CLANKIE_HOSTS": value})
