"""A metric family is a typed constant: the type checker, not a run with metrics on, catches a misspelt family, a
family of the wrong kind and a wrong label set (metrics are off by default, so none of these would fail at runtime).

mypy (strict, as ``pyproject.toml`` runs it) checks a probe written the way call sites are: the first lines are right
and pass; every line after them is one mistake and is an error on its own line, of the kind that names the mistake.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RIGHT = """\
from __future__ import annotations

from clankie import metrics
from clankie.metrics import LANES_LIVE, METER, TURN_DURATION, TURNS

METER.count(TURNS.of("settled", ""))
METER.count(TURNS.of(code="", outcome="settled"))
METER.set(LANES_LIVE.of(), 3.0)
METER.observe(TURN_DURATION, 1.5)
"""

WRONG = {
    'METER.count(metrics.TURNZ.of("settled", ""))': "attr-defined",  # a misspelt family
    "METER.count(LANES_LIVE.of())": "arg-type",  # a gauge counted
    'METER.set(TURNS.of("settled", ""), 1.0)': "arg-type",  # a counter set
    "METER.observe(LANES_LIVE, 1.0)": "arg-type",  # a gauge observed as a histogram
    'METER.count(TURNS.of("settled"))': "call-arg",  # a label missing
    'METER.count(TURNS.of(outcome="settled", cod=""))': "call-arg",  # a label misspelt
    'METER.count(TURNS.of("settled", "", "extra"))': "call-arg",  # a label too many
}


def test_a_wrong_family_kind_or_label_set_fails_the_type_check(tmp_path: Path) -> None:
    """Each wrong line is an error of its kind on that line; the right lines are clean."""
    probe = tmp_path / "probe.py"
    probe.write_text(RIGHT + "".join(line + "\n" for line in WRONG), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", "/dev/null", "--no-error-summary",
         str(probe)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    errors = {(int(n), code) for n, code in re.findall(r"probe\.py:(\d+): error: .*\[([a-z-]+)\]$", done.stdout, re.M)}
    first = RIGHT.count("\n") + 1
    assert errors == {(first + i, code) for i, code in enumerate(WRONG.values())}, done.stdout + done.stderr
