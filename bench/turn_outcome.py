"""bench turn_outcome: what the outcome enum costs on the turn path, against the ``Literal`` it replaced (issue 28).

Two legs, each side by side in one run:

1. **records** (in-process): the turn's result as the bridge receives it and as the service sends it,
   with ``clankie.protocol.TurnResult`` (``outcome`` a :class:`~clankie.protocol.TurnOutcome`) and with
   :class:`LiteralResult`, a verbatim copy of the record before the enum (``outcome`` a ``Literal``,
   its validator comparing strings), on the same four results:

   * ``receive``: a reply frame decoded and validated into the record (the bridge, every turn);
   * ``send``: the record built (one constructor per kind / ``TurnResult(outcome=...)``), put on the wire
     and framed (the service, every turn);
   * ``answered``: the room's question (``outcome.answered`` / ``outcome in ("settled", "absorbed")``).

2. **tree**: ``bench/ingress.py`` (``python -m bridge`` and ``python -m service`` as processes, the
   fake Discord and the fake Anthropic; 500 fresh turns on warm lanes, each waiting for its reply)
   run on this checkout (or on ``--ours-rev``, to leave out work of others not yet committed or
   committed since) and on a checkout of ``--alt-rev`` (default ``0e0f465``, the commit before the
   enum), alternately, ``--rounds`` times each, each in a subprocess with that checkout first on
   ``PYTHONPATH``. Its p50/p99 of the full gateway → model-request path, and the bridge's own share.

Run: ``.venv/bin/python bench/turn_outcome.py [--n 20000] [--rounds 4] [--alt-rev 0e0f465] [--ours-rev REV]``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, assert_never

from pydantic import model_validator

from clankie import framing, protocol
from clankie.protocol import Code, Record, TurnOutcome, TurnResult

REPO = Path(__file__).resolve().parents[1]
ALT_REV = "0e0f465"  # the last commit with outcome a Literal of strings
Outcome = Literal["settled", "silent", "absorbed", "failed"]


class LiteralResult(Record):
    """``TurnResult`` as it was before the enum (the fields and the validator, verbatim)."""

    outcome: Outcome
    turn_id: str | None = None
    text: str = ""
    media: tuple[str, ...] = ()
    code: str | None = None

    @model_validator(mode="after")
    def _fields_fit_the_outcome(self) -> LiteralResult:
        if (self.outcome == "failed") != (self.code is not None):
            raise ValueError("code is set exactly when the outcome is failed")
        if self.outcome != "settled" and (self.text or self.media):
            raise ValueError("only a settled turn carries text or media")
        return self


TEXT = "Eight, same lobby as last week; bring the charger this time. " * 3


def build_enum(outcome: TurnOutcome) -> TurnResult:
    match outcome:
        case TurnOutcome.SETTLED:
            return TurnResult.settled(TEXT, ("sha256:ab:browser/cd.png",), turn_id="turn-1-42")
        case TurnOutcome.SILENT:
            return TurnResult.silent(turn_id="turn-1-42")
        case TurnOutcome.ABSORBED:
            return TurnResult.absorbed(turn_id="turn-1-42")
        case TurnOutcome.FAILED:
            return TurnResult.failed(Code.CAPTAIN_MODEL_FAILED, turn_id="turn-1-42")
        case unreachable:
            assert_never(unreachable)


def build_literal(outcome: Outcome) -> LiteralResult:
    if outcome == "settled":
        return LiteralResult(outcome="settled", turn_id="turn-1-42", text=TEXT, media=("sha256:ab:browser/cd.png",))
    if outcome == "failed":
        return LiteralResult(outcome="failed", turn_id="turn-1-42", code=Code.CAPTAIN_MODEL_FAILED)
    return LiteralResult(outcome=outcome, turn_id="turn-1-42")


def per_op_ns(fn: Callable[[], object], n: int, per_call: int, repeats: int = 5) -> float:
    """The best of ``repeats`` runs of ``n`` calls of ``fn`` (each doing ``per_call`` operations), in ns per operation
    (the best is the run least disturbed by the shared machine)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / (n * per_call))
    return best


def receive(record: type[Record], bodies: list[bytes]) -> Callable[[], object]:
    """Decode and validate each reply body into ``record``, as the bridge's connection does."""
    def run() -> object:
        for body in bodies:
            envelope = protocol.parse_envelope(framing.decode_body(body))
            assert isinstance(envelope, protocol.Response)
            protocol.validate(record, envelope.result)
        return None
    return run


def records_leg(n: int) -> dict[str, tuple[float, float]]:
    """ns per operation (enum, literal), each over the four outcomes in turn."""
    outcomes = list(TurnOutcome)
    plain: list[Outcome] = ["settled", "silent", "absorbed", "failed"]
    assert [o.value for o in outcomes] == plain
    frames = [framing.encode(protocol.response(7, None, build_enum(o).to_wire())) for o in outcomes]
    assert frames == [framing.encode(protocol.response(7, None, build_literal(o).to_wire())) for o in plain], \
        "the enum changed the bytes on the wire"
    bodies = [f[framing.HEADER.size:] for f in frames]

    def send_enum() -> object:
        return [framing.encode(protocol.response(7, None, build_enum(o).to_wire())) for o in outcomes]

    def send_literal() -> object:
        return [framing.encode(protocol.response(7, None, build_literal(o).to_wire())) for o in plain]

    def answered_enum() -> object:
        return [o.answered for o in outcomes]

    def answered_literal() -> object:
        return [o in ("settled", "absorbed") for o in plain]

    k = len(outcomes)
    return {
        "receive": (per_op_ns(receive(TurnResult, bodies), n, k), per_op_ns(receive(LiteralResult, bodies), n, k)),
        "send": (per_op_ns(send_enum, n, k), per_op_ns(send_literal, n, k)),
        "answered": (per_op_ns(answered_enum, n * 10, k), per_op_ns(answered_literal, n * 10, k)),
    }


LINE = re.compile(r"^bench ingress: p50_ms=(?P<p50>[\d.]+) p99_ms=(?P<p99>[\d.]+) messages=(?P<n>\d+) "
                  r"bridge_p50_ms=(?P<bridge>[\d.]+)", re.MULTILINE)


def ingress(checkout: Path) -> dict[str, float]:
    """One run of ``bench/ingress.py`` from ``checkout`` (its own imports, its own bridge and service)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, str(checkout / "bench" / "ingress.py")], cwd=checkout, env=env,
                         capture_output=True, text=True, timeout=600, check=False)
    found = LINE.search(out.stdout)
    if out.returncode != 0 or found is None:
        raise SystemExit(f"bench/ingress.py in {checkout} failed ({out.returncode}):\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return {k: float(v) for k, v in found.groupdict().items()}


def extract(rev: str, into: Path) -> Path:
    """A checkout of ``rev`` (``git archive``, no worktree to clean up) at ``into``."""
    into.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=20_000, help="operations per record measurement")
    parser.add_argument("--rounds", type=int, default=4, help="tree runs per side (alternating)")
    parser.add_argument("--alt-rev", default=ALT_REV)
    parser.add_argument("--ours-rev", default=None, help="measure this revision instead of the checkout")
    args = parser.parse_args()

    print(f"records: best of 5 x {args.n} operations each, the four outcomes in turn (ns per operation)")
    rec = records_leg(args.n)
    for op, (ours, alt) in rec.items():
        print(f"  {op:>8}: enum {ours:8.0f} ns   literal {alt:8.0f} ns   enum/literal {ours / alt:.2f}x", flush=True)

    runs: dict[str, list[dict[str, float]]] = {"ours": [], "alt": []}
    with tempfile.TemporaryDirectory(prefix="ck-outcome-", dir="/tmp") as d:
        alt_checkout = extract(args.alt_rev, Path(d) / "alt")
        ours_checkout = extract(args.ours_rev, Path(d) / "ours") if args.ours_rev else REPO
        print(f"tree: bench/ingress.py, {args.ours_rev or 'this checkout'} and {args.alt_rev}, alternating, "
              f"{args.rounds} runs each")
        for r in range(args.rounds):
            sides = [("ours", ours_checkout), ("alt", alt_checkout)]
            for side, checkout in sides if r % 2 == 0 else sides[::-1]:
                got = ingress(checkout)
                runs[side].append(got)
                print(f"  {side:>4} run {r + 1}: p50 {got['p50']:.2f} ms  p99 {got['p99']:.2f} ms  "
                      f"bridge p50 {got['bridge']:.2f} ms  ({got['n']:.0f} turns)", flush=True)
    tree = {side: {k: statistics.median(run[k] for run in rs) for k in ("p50", "p99", "bridge")}
            for side, rs in runs.items()}
    ratio = {k: tree["ours"][k] / tree["alt"][k] for k in ("p50", "p99", "bridge")}
    print(f"  median of runs: ours p50 {tree['ours']['p50']:.2f} ms vs {tree['alt']['p50']:.2f} ms ({ratio['p50']:.2f}x), "
          f"p99 {tree['ours']['p99']:.2f} vs {tree['alt']['p99']:.2f} ms ({ratio['p99']:.2f}x), "
          f"bridge p50 {tree['ours']['bridge']:.2f} vs {tree['alt']['bridge']:.2f} ms ({ratio['bridge']:.2f}x)")
    print("bench turn_outcome: " + " ".join(f"{op}_ns={ours:.0f} alt_{op}_ns={alt:.0f} {op}_ratio={ours / alt:.2f}"
                                            for op, (ours, alt) in rec.items())
          + f" p50_ms={tree['ours']['p50']:.2f} alt_p50_ms={tree['alt']['p50']:.2f} p50_ratio={ratio['p50']:.2f}"
          + f" p99_ratio={ratio['p99']:.2f} bridge_p50_ratio={ratio['bridge']:.2f} alt_rev={args.alt_rev}"
          + f" ours_rev={args.ours_rev or 'checkout'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
