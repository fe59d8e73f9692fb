"""requirements.lock pins, with hashes, everything pyproject.toml asks for; scripts/audit fails only for a finding."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9._-]+)==(\S+)(?:\s*;\s*([^\\]+?))?\s*\\?$")


def locked() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) from requirements.lock (continuation lines joined)."""
    entries: dict[str, tuple[str, list[str]]] = {}
    current: str | None = None
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(" "):
            match = PIN.match(line)
            assert match, f"not a pinned requirement: {line!r}"
            current = canonicalize_name(match.group(1))
            entries[current] = (match.group(2), [])
        else:
            assert current is not None
            entries[current][1].extend(re.findall(r"--hash=sha256:([0-9a-f]{64})", line))
    return entries


def requested() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    names = list(project["project"]["dependencies"])
    for extra in ("test", "dev", "otel"):
        names += project["project"]["optional-dependencies"][extra]
    names += project["dependency-groups"]["bootstrap"]
    return [Requirement(n) for n in names]


def test_every_requested_distribution_is_pinned_within_its_range() -> None:
    """Each dependency, extra and bootstrap tool of pyproject.toml has one exact pin in the lock that its range
    admits: a dependency added to pyproject.toml without running scripts/lock fails here."""
    pins = locked()
    for req in requested():
        if req.marker is not None and not req.marker.evaluate():  # this interpreter's environment
            continue
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not in requirements.lock; run scripts/lock"
        version = pins[name][0]
        assert req.specifier.contains(version, prereleases=True), f"{req.name}=={version} is outside {req.specifier}"


def test_every_pin_carries_sha256_hashes() -> None:
    """pip --require-hashes installs nothing that is not exactly a file the lock names."""
    pins = locked()
    assert len(pins) > 50
    assert not [name for name, (_, hashes) in pins.items() if not hashes]


FAKE_AUDIT = """#!/bin/sh
# a stand-in for pip-audit: writes $REPORT (if set) where -o points, says $SAY on stderr, exits $STATUS
while [ "$#" -gt 0 ]; do
  if [ "$1" = "-o" ]; then out="$2"; fi
  shift
done
[ -n "$REPORT" ] && printf '%s' "$REPORT" > "$out"
[ -n "$SAY" ] && echo "$SAY" >&2
exit "$STATUS"
"""


def audit(tmp: Path, *, report: object | None, status: int, say: str = "") -> subprocess.CompletedProcess[str]:
    tool = tmp / "pip-audit"
    tool.write_text(FAKE_AUDIT)
    tool.chmod(0o755)
    env = {**os.environ, "CLANKIE_PIP_AUDIT": str(tool), "STATUS": str(status), "SAY": say,
           "REPORT": json.dumps(report) if report is not None else ""}
    return subprocess.run([sys.executable, str(ROOT / "scripts/audit")], env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def test_audit_fails_for_a_known_vulnerability_and_names_it(tmp_path: Path) -> None:
    """A locked version with an advisory fails the gate, naming the package, version and advisory."""
    report = {"dependencies": [{"name": "aiohttp", "version": "3.14.5", "vulns": [{"id": "GHSA-xxxx-yyyy-zzzz"}]},
                               {"name": "yarl", "version": "1.25.0", "vulns": []}]}
    proc = audit(tmp_path, report=report, status=1)
    assert proc.returncode == 1
    assert "aiohttp 3.14.5: GHSA-xxxx-yyyy-zzzz" in proc.stderr


def test_audit_passes_a_clean_report(tmp_path: Path) -> None:
    """No advisory: exit 0 and how many packages were audited."""
    report = {"dependencies": [{"name": "yarl", "version": "1.25.0", "vulns": []}]}
    proc = audit(tmp_path, report=report, status=0)
    assert proc.returncode == 0 and "1 locked packages audited, no known vulnerabilities" in proc.stdout


def test_an_unreachable_database_is_one_line_never_a_failure(tmp_path: Path) -> None:
    """No network: pip-audit writes no report and exits 1; the gate says why in one line and passes."""
    proc = audit(tmp_path, report=None, status=1, say="requests.exceptions.ConnectionError: Failed to resolve 'pypi.org'")
    assert proc.returncode == 0
    assert proc.stdout.strip().splitlines() == [
        "pip-audit: skipped, the advisory database could not be asked "
        "(requests.exceptions.ConnectionError: Failed to resolve 'pypi.org')"
    ]


def test_an_index_without_the_json_api_is_not_a_false_all_clear(tmp_path: Path) -> None:
    """Every package 'not found on PyPI' (a mirror with only the simple index) is reported as not audited."""
    report = {"dependencies": [{"name": n, "skip_reason": "Dependency not found on PyPI"} for n in ("a", "b")]}
    proc = audit(tmp_path, report=report, status=0)
    assert proc.returncode == 0 and "nothing was audited" in proc.stdout and "no known" not in proc.stdout


def test_bootstrap_installs_uv_from_the_locks_own_pin_and_every_one_of_its_hashes() -> None:
    """scripts/bootstrap has pip install uv from uv's lines of the lock (then uv installs the rest): what its ``sed``
    cuts out is the one requirement ``uv==<the locked version>`` with every hash the lock has for it, and nothing of
    the next distribution's."""
    (command,) = [line.strip() for line in (ROOT / "scripts/bootstrap").read_text().splitlines()
                  if line.strip().startswith("sed ") and "uv==" in line]
    command = command.split(" > ", 1)[0]  # where the script writes it: here, read from stdout
    cut = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    version, hashes = locked()["uv"]
    assert cut.splitlines()[0] == f"uv=={version} \\"
    assert re.findall(r"--hash=sha256:([0-9a-f]{64})", cut) == hashes and len(hashes) >= 1
    assert all(line.startswith(" ") for line in cut.splitlines()[1:]), cut
