"""The generated docs (state machines, settings reference) match the code: scripts/gen-docs --check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_generated_docs_are_up_to_date() -> None:
    """A table or a setting changed without re-running scripts/gen-docs fails here."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen-docs"), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_the_check_sees_drift(tmp_path: Path) -> None:
    """--check exits 1 when a generated file differs (run on a copy of the docs, the checkout untouched)."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("gen_docs", str(ROOT / "scripts" / "gen-docs"))
    spec = importlib.util.spec_from_loader("gen_docs", loader)
    assert spec is not None
    gen = importlib.util.module_from_spec(spec)
    loader.exec_module(gen)
    (tmp_path / "docs").mkdir()
    for rel in gen.TARGETS:
        (tmp_path / rel).write_text((ROOT / rel).read_text(encoding="utf-8"), encoding="utf-8")
    setattr(gen, "OUT", tmp_path)  # noqa: B010  (a module loaded from a path: mypy cannot see its names)
    assert gen.main(["--check"]) == 0
    (tmp_path / "docs" / "state-machines.md").write_text("stale\n", encoding="utf-8")
    assert gen.main(["--check"]) == 1
