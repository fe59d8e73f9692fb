"""A turn's outcome is an enum whose predicates are defined once, and whose wire form did not change.

The frames and JSON lines below were produced by the code before the enum (commit 5d24062, where
``outcome`` was a ``Literal`` of strings): a peer or a file from then must read the same, and a
result built now must encode to exactly those bytes.
"""

from __future__ import annotations

import json

import pytest

from clankie import framing, protocol
from clankie.jsonl import encode_line
from clankie.protocol import Code, TurnOutcome, TurnResult

# outcome -> (answered, visible, folded): every member, so a fifth outcome fails here until it is decided
TABLE: dict[TurnOutcome, tuple[bool, bool, TurnOutcome]] = {
    TurnOutcome.SETTLED: (True, True, TurnOutcome.ABSORBED),
    TurnOutcome.ABSORBED: (True, False, TurnOutcome.ABSORBED),
    TurnOutcome.SILENT: (False, False, TurnOutcome.SILENT),
    TurnOutcome.FAILED: (False, False, TurnOutcome.FAILED),
}

RESULTS = {
    TurnOutcome.SETTLED: TurnResult.settled("eight, same lobby", ("sha256:ab:browser/cd.png",), turn_id="turn-1-42"),
    TurnOutcome.SILENT: TurnResult.silent(turn_id="turn-1-43"),
    TurnOutcome.ABSORBED: TurnResult.absorbed(turn_id="turn-1-42"),
    TurnOutcome.FAILED: TurnResult.failed(Code.CAPTAIN_MODEL_FAILED, turn_id="turn-1-44"),
}

# protocol.response(7, None, result.to_wire()) framed, as 5d24062 wrote it
OLD_FRAMES = {
    TurnOutcome.SETTLED: "00000064940107c085a76f7574636f6d65a7736574746c6564a77475726e5f6964a97475726e2d312d3432a474657874"
                         "b165696768742c2073616d65206c6f626279a56d6564696191b87368613235363a61623a62726f777365722f63642e70"
                         "6e67a4636f6465c0",
    TurnOutcome.SILENT: "00000039940107c085a76f7574636f6d65a673696c656e74a77475726e5f6964a97475726e2d312d3433a474657874a0a5"
                        "6d6564696190a4636f6465c0",
    TurnOutcome.ABSORBED: "0000003b940107c085a76f7574636f6d65a86162736f72626564a77475726e5f6964a97475726e2d312d3432a4746578"
                          "74a0a56d6564696190a4636f6465c0",
    TurnOutcome.FAILED: "0000004d940107c085a76f7574636f6d65a66661696c6564a77475726e5f6964a97475726e2d312d3434a474657874a0a5"
                        "6d6564696190a4636f6465b46361707461696e5f6d6f64656c5f6661696c6564",
}

# the retained result's JSON line (the service's delivery records), as 5d24062 wrote it
OLD_LINES = {
    TurnOutcome.SETTLED: b'{"outcome":"settled","turn_id":"turn-1-42","text":"eight, same lobby",'
                         b'"media":["sha256:ab:browser/cd.png"],"code":null}\n',
    TurnOutcome.SILENT: b'{"outcome":"silent","turn_id":"turn-1-43","text":"","media":[],"code":null}\n',
    TurnOutcome.ABSORBED: b'{"outcome":"absorbed","turn_id":"turn-1-42","text":"","media":[],"code":null}\n',
    TurnOutcome.FAILED: b'{"outcome":"failed","turn_id":"turn-1-44","text":"","media":[],'
                        b'"code":"captain_model_failed"}\n',
}


def test_every_outcome_is_in_the_table() -> None:
    """The table below is the whole enum: a new outcome must say whether it answers, posts and folds."""
    assert set(TABLE) == set(TurnOutcome) == set(RESULTS) == set(OLD_FRAMES) == set(OLD_LINES)


@pytest.mark.parametrize("outcome", list(TurnOutcome))
def test_each_outcome_answers_posts_and_folds_as_the_table_says(outcome: TurnOutcome) -> None:
    """answered: settled or absorbed; visible: only settled posts; a fold of an answered turn is absorbed."""
    assert (outcome.answered, outcome.visible, outcome.folded) == TABLE[outcome]


def test_the_wire_value_is_the_old_string() -> None:
    assert [o.value for o in TurnOutcome] == ["settled", "silent", "absorbed", "failed"]
    assert TurnOutcome("failed") is TurnOutcome.FAILED and f"({TurnOutcome.SILENT})" == "(silent)"


@pytest.mark.parametrize("outcome", list(TurnOutcome))
def test_each_constructor_builds_its_own_kind(outcome: TurnOutcome) -> None:
    """One constructor per kind; the fields the kind does not carry are left empty."""
    result = RESULTS[outcome]
    assert result.outcome is outcome
    assert (result.code is not None) == (outcome is TurnOutcome.FAILED)
    assert bool(result.text) == (outcome is TurnOutcome.SETTLED)


@pytest.mark.parametrize("outcome", list(TurnOutcome))
def test_a_new_result_encodes_to_the_old_frame_byte_for_byte(outcome: TurnOutcome) -> None:
    assert framing.encode(protocol.response(7, None, RESULTS[outcome].to_wire())) == bytes.fromhex(OLD_FRAMES[outcome])


@pytest.mark.parametrize("outcome", list(TurnOutcome))
def test_an_old_frame_decodes_to_the_same_result(outcome: TurnOutcome) -> None:
    """What an older peer sent reads as the enum member, equal to the result built now."""
    decoder = framing.FrameDecoder()
    decoder.feed(bytes.fromhex(OLD_FRAMES[outcome]))
    envelope = protocol.parse_envelope(decoder.next_message())
    assert isinstance(envelope, protocol.Response)
    result = protocol.validate(TurnResult, envelope.result)
    assert result == RESULTS[outcome] and result.outcome is outcome


@pytest.mark.parametrize("outcome", list(TurnOutcome))
def test_a_retained_result_line_is_unchanged_both_ways(outcome: TurnOutcome) -> None:
    """The service's delivery records keep the result as a JSON line: the same bytes out, the same record in."""
    assert encode_line(RESULTS[outcome].to_wire()) == OLD_LINES[outcome]
    again = TurnResult.model_validate(json.loads(OLD_LINES[outcome]))
    assert again == RESULTS[outcome] and again.outcome is outcome
