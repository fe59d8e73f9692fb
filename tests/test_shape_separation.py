"""Issue 33's two shape figures (``scripts/shape_report.py``): upward imports from the agent runtime and metric
names as strings at the meter's call sites. Each counter sees what it counts in a made-up tree, and today's tree
has none of either."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _shape_report() -> ModuleType:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import shape_report  # type: ignore[import-not-found]  # scripts/ is not a package
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    module: ModuleType = shape_report
    return module


shape = _shape_report()


def _tree(root: Path, files: dict[str, str]) -> Path:
    for package in ("clankie", "supervisor", "service", "bridge", "hosts"):
        (root / package).mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def test_an_upward_import_is_counted_wherever_and_however_it_is_written(tmp_path: Path) -> None:
    """Absolute, relative and lazy imports of the service from the runtime count; the runtime's own, the kernel's
    and the service's imports of the runtime do not."""
    root = _tree(tmp_path, {
        "service/agent/attempts.py": "from service import telemetry\nfrom service.agent import observe\n",
        "service/agent/tools.py": "from .. import otel\nfrom . import content\nfrom clankie.clock import Clock\n"
                                  "def f() -> None:\n    import service.captain.shell\n",
        "service/app.py": "from service.agent import observe\nfrom service import telemetry\n",
    })
    assert shape.upward_imports(root) == [
        "service/agent/attempts.py:1 service.telemetry", "service/agent/tools.py:1 service.otel",
        "service/agent/tools.py:5 service.captain.shell",
    ]


def test_a_meter_call_naming_its_family_by_a_string_is_counted_and_a_typed_family_is_not(tmp_path: Path) -> None:
    """A literal, an f-string and a module constant holding a name count; a typed family constant does not, nor does
    a ``count``/``set`` call on anything but a meter."""
    root = _tree(tmp_path, {
        "bridge/app.py": 'FAMILY = "clankie_discord_requests_total"\n'
                         'METER.count("clankie_turns_total", "a", "b")\n'
                         'METER.set(f"clankie_budget_limit_{unit}", 1.0, "tree")\n'
                         "METER.count(FAMILY, route, status)\n"
                         'METER.count(TURNS.of("a", "b"))\n'
                         'seen.set("x")\nwords.count("x")\n',
        "service/run.py": 'self._meter.observe("clankie_turn_duration_seconds", 1.0)\nmeter.set(LANES_LIVE.of(), 1.0)\n',
    })
    assert shape.metric_names_as_strings(root) == ["bridge/app.py:2", "bridge/app.py:3", "bridge/app.py:4",
                                                   "service/run.py:1"]


def test_today_the_runtime_stands_alone_and_every_metric_family_is_typed() -> None:
    """Both figures are 0 on this tree, and the static block says so."""
    assert shape.separation_figures(ROOT) == {"upward imports from the agent runtime": 0,
                                              "metric names as strings at call sites": 0}
    assert shape.separation_line(ROOT) in shape.static_block(ROOT)
