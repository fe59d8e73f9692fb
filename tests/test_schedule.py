"""The suite's schedule (tests/conftest.py): the long tests without a ``slow`` mark that start early are real tests."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import LONG_UNMARKED

ROOT = Path(__file__).resolve().parent.parent


def test_every_long_unmarked_entry_names_a_test_file_or_a_test_in_it() -> None:
    """A renamed or moved test would silently drop back to the end of the run: each entry still exists."""
    for entry in LONG_UNMARKED:
        path, _, name = entry.partition("::")
        source = ROOT / path
        assert source.is_file(), entry
        if name:
            assert re.search(rf"^def {re.escape(name)}\(", source.read_text(encoding="utf-8"), re.M), entry


def test_the_long_unmarked_tests_are_not_marked_slow() -> None:
    """A test marked ``slow`` starts first already; listing it here too would say it is something it is not."""
    for entry in LONG_UNMARKED:
        path, _, name = entry.partition("::")
        text = (ROOT / path).read_text(encoding="utf-8")
        assert "pytestmark = [pytest.mark.slow" not in text and "pytestmark = pytest.mark.slow" not in text, entry
        if name:
            head = text[: text.index(f"def {name}(")].rsplit("\n\n\n", 1)[-1]
            assert "@pytest.mark.slow" not in head, entry
