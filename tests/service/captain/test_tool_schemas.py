"""The diagram tool schemas the model sees are no looser than what the tldraw host accepts."""

from __future__ import annotations

from typing import Any

import pytest

from hosts.tldraw.schema_er import CARDINALITIES, KEY_ROLES, ErLimits, parse_er
from hosts.tldraw.schema_sequence import MESSAGE_KINDS, SequenceLimits, parse_sequence
from service.captain.tools import model_tools as tools

ER, SEQ = ErLimits(), SequenceLimits()


def _at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


def _objects(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        found = [node] if node.get("type") == "object" else []
        return found + [o for v in node.values() for o in _objects(v)]
    if isinstance(node, list):
        return [o for v in node for o in _objects(v)]
    return []


ER_LIMITS = [
    ("entities", "maxItems", ER.entities),
    ("entities.[].fields", "maxItems", ER.fields_per_entity),
    ("relations", "maxItems", ER.relations),
    ("title", "maxLength", ER.title_chars),
    ("entities.[].name", "maxLength", ER.name_chars),
    ("entities.[].fields.[].name", "maxLength", ER.name_chars),
    ("entities.[].fields.[].type", "maxLength", ER.type_chars),
    ("relations.[].from", "maxLength", ER.name_chars),
    ("relations.[].to", "maxLength", ER.name_chars),
    ("relations.[].label", "maxLength", ER.label_chars),
]
SEQ_LIMITS = [
    ("participants", "maxItems", SEQ.participants),
    ("messages", "maxItems", SEQ.messages),
    ("title", "maxLength", SEQ.title_chars),
    ("participants.[].name", "maxLength", SEQ.name_chars),
    ("messages.[].from", "maxLength", SEQ.name_chars),
    ("messages.[].to", "maxLength", SEQ.name_chars),
    ("messages.[].text", "maxLength", SEQ.text_chars),
]


@pytest.mark.parametrize(
    ("schema", "path", "keyword", "host_limit"),
    [(tools.ER_SCHEMA, *row) for row in ER_LIMITS] + [(tools.SEQUENCE_SCHEMA, *row) for row in SEQ_LIMITS],
)
def test_schema_limit_is_no_looser_than_the_host(schema: dict[str, Any], path: str, keyword: str, host_limit: int) -> None:
    """Every count and length the host enforces is stated to the model, at or below the host's number."""
    assert _at(schema, path)[keyword] <= host_limit


def test_schemas_are_closed_and_enums_match_the_host() -> None:
    """Every object in both schemas forbids unknown keys, the host's way, and the choices are the host's."""
    for schema in (tools.ER_SCHEMA, tools.SEQUENCE_SCHEMA):
        objects = _objects(schema)
        assert objects and all(o.get("additionalProperties") is False for o in objects)
    assert tuple(_at(tools.ER_SCHEMA, "entities.[].fields.[].key")["enum"]) == KEY_ROLES
    assert tuple(_at(tools.ER_SCHEMA, "relations.[].cardinality")["enum"]) == CARDINALITIES
    assert tuple(_at(tools.SEQUENCE_SCHEMA, "messages.[].kind")["enum"]) == MESSAGE_KINDS
    assert tools.ER_FIELDS_TOTAL <= ER.fields_total
    assert str(tools.ER_FIELDS_TOTAL) in _at(tools.ER_SCHEMA, "entities")["description"]


def _name(i: int, width: int) -> str:
    return str(i).rjust(width, "n")


def test_a_spec_at_the_schema_limits_is_accepted_by_the_host() -> None:
    """The biggest diagram the schema allows (within the stated field total) is one the host draws, not refuses."""
    s = tools
    per = s.ER_FIELDS_PER_ENTITY
    n_entities = min(s.ER_ENTITIES, s.ER_FIELDS_TOTAL // per)
    entities = [
        {
            "name": _name(i, s.ER_NAME_CHARS),
            "fields": [{"name": _name(j, s.ER_NAME_CHARS), "type": "t" * s.ER_TYPE_CHARS, "key": "pk"} for j in range(per)],
        }
        for i in range(n_entities)
    ] + [{"name": _name(i, s.ER_NAME_CHARS)} for i in range(n_entities, s.ER_ENTITIES)]
    relations = [
        {"from": entities[i % 2]["name"], "to": entities[2 + i % 3]["name"], "cardinality": "one_to_many", "label": "l" * s.ER_LABEL_CHARS}
        for i in range(s.ER_RELATIONS)
    ]
    er = parse_er({"title": "T" * s.ER_TITLE_CHARS, "entities": entities, "relations": relations})
    assert len(er.entities) == s.ER_ENTITIES and len(er.relations) == s.ER_RELATIONS

    names = [_name(i, s.SEQ_NAME_CHARS) for i in range(s.SEQ_PARTICIPANTS)]
    messages = [{"from": names[i % len(names)], "to": names[-1], "text": "x" * s.SEQ_TEXT_CHARS, "kind": "reply"} for i in range(s.SEQ_MESSAGES)]
    seq = parse_sequence({"title": "T" * s.SEQ_TITLE_CHARS, "participants": [{"name": n} for n in names], "messages": messages})
    assert len(seq.participants) == s.SEQ_PARTICIPANTS and len(seq.messages) == s.SEQ_MESSAGES
