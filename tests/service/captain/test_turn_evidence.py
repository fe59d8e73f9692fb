"""The evidence line a turn ends with, for every outcome (the service's one mapping from TurnOutcome)."""

from __future__ import annotations

from clankie.protocol import TurnOutcome
from service.captain.service import evidence_event


def test_each_outcome_ends_its_evidence_with_its_own_word_and_a_silent_one_declined() -> None:
    assert {o: evidence_event(o) for o in TurnOutcome} == {
        TurnOutcome.SETTLED: "settled", TurnOutcome.ABSORBED: "absorbed",
        TurnOutcome.SILENT: "declined", TurnOutcome.FAILED: "failed"}
    assert all(type(evidence_event(o)) is str for o in TurnOutcome)  # a plain word in the evidence file
