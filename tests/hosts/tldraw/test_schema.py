"""Schema validation of draw_er_diagram and draw_sequence_diagram requests."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hosts.tldraw.engine import DiagramInvalid, DiagramTooLarge
from hosts.tldraw.examples import er_example, sequence_example
from hosts.tldraw.schema_er import ErLimits, parse_er
from hosts.tldraw.schema_sequence import SequenceLimits, parse_sequence


def test_good_er_request_parses() -> None:
    """A well-formed ER request yields typed entities, fields and relations."""
    diagram = parse_er(er_example(5))
    assert [e.name for e in diagram.entities][:2] == ["table_0", "table_1"]
    assert diagram.entities[0].fields[0].key == "pk"
    assert diagram.relations[0].source == 0 and diagram.relations[0].target == 1


def test_good_sequence_request_parses() -> None:
    """A well-formed sequence request keeps message order and defaults kind to sync."""
    diagram = parse_sequence(sequence_example())
    assert diagram.participants == ("Client", "API", "Payments")
    assert [m.kind for m in diagram.messages][:3] == ["sync", "sync", "sync"]
    assert diagram.messages[3].kind == "reply"


def test_whitespace_is_folded_and_trimmed() -> None:
    """Runs of whitespace in a label become one space and the ends are trimmed."""
    spec = {"entities": [{"name": "  user\t \n accounts  "}]}
    assert parse_er(spec).entities[0].name == "user accounts"


def _er_with(path: list[Any], value: object) -> dict[str, Any]:
    spec = copy.deepcopy(er_example(3))
    target: Any = spec
    for step in path[:-1]:
        target = target[step]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return spec


@pytest.mark.parametrize(
    ("path", "value", "fragment"),
    [
        (["entities"], [], "at least 1"),
        (["entities"], "users", "expected a list"),
        (["entities", 0, "name"], "", "must not be empty"),
        (["entities", 0, "name"], 7, "expected a string"),
        (["entities", 0, "colour"], "red", "unknown key 'colour'"),
        (["entities", 0, "fields", 0, "key"], "primary", "expected one of pk, fk, pk_fk, uk"),
        (["entities", 1, "name"], "table_0", "duplicate entity name"),
        (["relations", 0, "to"], "ghost", "no entity named 'ghost'"),
        (["relations", 0, "cardinality"], "1:N", "expected one of"),
        (["relations", 0, "to"], "table_0", "self-relations"),
        (["relations", 0, "from"], KeyError, "missing required key 'from'"),
        (["entities", 0, "name"], "a\x00b", "U+0000"),
        (["entities", 0, "name"], "bell\x07", "U+0007"),
        (["entities", 0, "name"], "bad\ufffe", "U+FFFE"),
        (["entities", 0, "name"], "half\ud800", "U+D800"),
        (["title"], ["x"], "expected a string"),
    ],
)
def test_bad_er_requests_are_invalid(path: list[Any], value: object, fragment: str) -> None:
    """Each malformed ER request is refused as diagram_invalid, naming the problem."""
    with pytest.raises(DiagramInvalid) as info:
        parse_er(_er_with(path, value))
    assert info.value.code == "diagram_invalid"
    assert fragment in str(info.value)


def test_non_dict_request_is_invalid() -> None:
    """A request that is not an object is refused as diagram_invalid."""
    with pytest.raises(DiagramInvalid, match="expected an object"):
        parse_er(["entities"])


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"participants": [{"name": "A"}], "messages": []}, "at least 1"),
        ({"participants": [{"name": "A"}], "messages": [{"from": "A", "to": "B"}]},
         "no participant named 'B'"),
        ({"participants": [{"name": "A"}, {"name": "A"}],
          "messages": [{"from": "A", "to": "A"}]}, "duplicate participant"),
        ({"participants": [{"name": "A"}],
          "messages": [{"from": "A", "to": "A", "kind": "oneway"}]}, "expected one of sync"),
        ({"participants": ["A"], "messages": [{"from": "A", "to": "A"}]}, "expected an object"),
        ({"participants": [{"name": "A"}], "messages": [{"from": "A", "to": "A", "text": 3}]},
         "expected a string"),
    ],
)
def test_bad_sequence_requests_are_invalid(spec: dict[str, Any], fragment: str) -> None:
    """Each malformed sequence request is refused as diagram_invalid, naming the problem."""
    with pytest.raises(DiagramInvalid) as info:
        parse_sequence(spec)
    assert fragment in str(info.value)


def test_too_many_entities_is_too_large() -> None:
    """More entities than the limit is refused as diagram_too_large, not invalid."""
    limit = ErLimits().entities
    spec = {"entities": [{"name": f"t{i}"} for i in range(limit + 1)]}
    with pytest.raises(DiagramTooLarge) as info:
        parse_er(spec)
    assert info.value.code == "diagram_too_large"


def test_entity_count_at_the_limit_is_accepted() -> None:
    """Exactly the maximum number of entities is still accepted."""
    spec = {"entities": [{"name": f"t{i}"} for i in range(ErLimits().entities)]}
    assert len(parse_er(spec).entities) == ErLimits().entities


def test_too_many_fields_in_all_is_too_large() -> None:
    """The total field budget applies across entities."""
    per = ErLimits().fields_per_entity
    count = ErLimits().fields_total // per + 1
    spec = {"entities": [
        {"name": f"t{i}", "fields": [{"name": f"f{k}"} for k in range(per)]} for i in range(count)
    ]}
    with pytest.raises(DiagramTooLarge, match="fields in all"):
        parse_er(spec)


def test_long_name_is_too_large() -> None:
    """A name longer than its character limit is refused as diagram_too_large."""
    spec = {"entities": [{"name": "x" * (ErLimits().name_chars + 1)}]}
    with pytest.raises(DiagramTooLarge, match="at most 64 characters"):
        parse_er(spec)


def test_huge_string_is_refused_before_scanning() -> None:
    """A megabyte label is refused as too large without being folded first."""
    spec = {"entities": [{"name": "x" * 1_000_000}]}
    with pytest.raises(DiagramTooLarge):
        parse_er(spec)


def test_too_many_messages_is_too_large() -> None:
    """More messages than the limit is refused as diagram_too_large."""
    count = SequenceLimits().messages + 1
    spec = {"participants": [{"name": "A"}], "messages": [{"from": "A", "to": "A"}] * count}
    with pytest.raises(DiagramTooLarge):
        parse_sequence(spec)


def test_markup_in_labels_is_accepted_as_text() -> None:
    """Markup-looking text is legal content; it is escaped later, never interpreted."""
    spec = {"entities": [{"name": "<script>alert(1)</script> & ]]>"}]}
    assert parse_er(spec).entities[0].name.startswith("<script>")
