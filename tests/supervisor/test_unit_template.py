"""The shipped template unit `clankie@.service`: one tree per shard group, otherwise the single-tree unit exactly."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "docs" / "systemd"
TEMPLATE = UNITS / "clankie@.service"
SINGLE = UNITS / "clankie.service"
PER_INSTANCE = {"Description", "StateDirectory", "RuntimeDirectory", "EnvironmentFile"}

needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                           reason="systemd-analyze is not installed here")


def directives(unit: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def test_each_instance_has_its_own_state_runtime_dir_and_shard_settings() -> None:
    d = directives(TEMPLATE)
    assert d["StateDirectory"] == ["clankie/%i"]
    assert d["RuntimeDirectory"] == ["clankie-%i"]
    assert d["EnvironmentFile"] == ["-/etc/clankie/%i.env"]
    assert "%i" in d["Description"][0]


def test_apart_from_the_instance_lines_the_template_is_the_single_tree_unit() -> None:
    """Sandbox, limits, credentials, restart policy: a change to one unit that misses the other fails here."""
    template, single = directives(TEMPLATE), directives(SINGLE)
    assert {k: v for k, v in template.items() if k not in PER_INSTANCE} == \
           {k: v for k, v in single.items() if k not in PER_INSTANCE}
    sections = [line for line in TEMPLATE.read_text().splitlines() if line.startswith("[")]
    assert sections == [line for line in SINGLE.read_text().splitlines() if line.startswith("[")]


@needs_systemd_analyze
def test_systemd_analyze_verify_accepts_an_instance(tmp_path: Path) -> None:
    """`systemd-analyze verify clankie@a.service` has no complaint (pointed at this checkout's clankie)."""
    clankie = Path(sys.executable).parent / "clankie"
    (tmp_path / "clankie@.service").write_text(TEMPLATE.read_text().replace("/opt/clankie/venv/bin/clankie", str(clankie)))
    proc = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "clankie@a.service")],
                          capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "clankie@" not in proc.stderr, proc.stderr


@needs_systemd_analyze
def test_an_instance_exposes_as_little_as_the_single_unit(tmp_path: Path) -> None:
    unit = tmp_path / "clankie@.service"
    unit.write_text(TEMPLATE.read_text())
    proc = subprocess.run(["systemd-analyze", "security", "--offline=true", str(tmp_path / "clankie@a.service")],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    found = re.search(r"Overall exposure level for clankie@a.service: (\d+\.\d+)", proc.stdout)
    assert found is not None, proc.stdout[-500:] + proc.stderr
    assert float(found.group(1)) <= 2.0, proc.stdout
