"""docs/protocol.md carries the method table as the code declares it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "render-protocol-doc"


def check(doc: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--check", "--doc", str(doc)],
                          capture_output=True, text=True, check=False)


def test_the_protocol_doc_matches_the_method_table() -> None:
    result = check(ROOT / "docs" / "protocol.md")
    assert result.returncode == 0, result.stderr
    text = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    for method in ("doctor", "probe_artifact", "resolve_artifact"):
        assert f"`{method}`" in text


def test_a_drifted_doc_fails_the_check_and_rendering_fixes_it(tmp_path: Path) -> None:
    doc = tmp_path / "protocol.md"
    current = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    doc.write_text(current.replace("| `doctor` |", "| `doctr` |"), encoding="utf-8")
    drifted = check(doc)
    assert drifted.returncode == 1 and "out of date" in drifted.stderr
    subprocess.run([sys.executable, str(SCRIPT), "--doc", str(doc)], check=True)
    assert check(doc).returncode == 0
    assert doc.read_text(encoding="utf-8") == current
