"""The ``draw_er_diagram`` request: strict schema, limits, typed result.

Request shape (plain dict, as decoded from msgpack)::

    {"title"?: str,
     "entities": [{"name": str,
                   "fields"?: [{"name": str, "type"?: str,
                                "key"?: "pk" | "fk" | "pk_fk" | "uk"}]}],
     "relations"?: [{"from": str, "to": str,
                     "cardinality": "one_to_one" | "one_to_many"
                                    | "many_to_one" | "many_to_many",
                     "label"?: str}]}
"""

from __future__ import annotations

from dataclasses import dataclass

from .checks import read_choice, read_list, read_mapping, read_text
from .errors import DiagramInvalid, DiagramTooLarge

__all__ = ["CARDINALITIES", "KEY_ROLES", "ErDiagram", "ErLimits", "parse_er"]

KEY_ROLES = ("pk", "fk", "pk_fk", "uk")
CARDINALITIES = ("one_to_one", "one_to_many", "many_to_one", "many_to_many")


@dataclass(frozen=True, slots=True)
class ErLimits:
    """Size limits for one ER request (counts and characters)."""

    entities: int = 60
    fields_per_entity: int = 40
    fields_total: int = 600
    relations: int = 120
    name_chars: int = 64
    type_chars: int = 48
    label_chars: int = 80
    title_chars: int = 120


@dataclass(frozen=True, slots=True)
class Field:
    """One column of an entity."""

    name: str
    type: str
    key: str | None


@dataclass(frozen=True, slots=True)
class Entity:
    """One table or record type."""

    name: str
    fields: tuple[Field, ...]


@dataclass(frozen=True, slots=True)
class Relation:
    """A relation between two entities, by index into ``ErDiagram.entities``."""

    source: int
    target: int
    cardinality: str
    label: str


@dataclass(frozen=True, slots=True)
class ErDiagram:
    """A validated ER request."""

    title: str
    entities: tuple[Entity, ...]
    relations: tuple[Relation, ...]


def parse_er(spec: object, limits: ErLimits | None = None) -> ErDiagram:
    """Validate ``spec`` and return the typed diagram, or raise a refusal."""
    lim = limits or ErLimits()
    top = read_mapping(spec, "request", required=("entities",), optional=("title", "relations"))
    title = read_text(top.get("title", ""), "title", max_chars=lim.title_chars, allow_empty=True)
    raw_entities = read_list(top["entities"], "entities", min_items=1, max_items=lim.entities)
    entities = tuple(_entity(raw, f"entities[{i}]", lim) for i, raw in enumerate(raw_entities))
    total = sum(len(e.fields) for e in entities)
    if total > lim.fields_total:
        raise DiagramTooLarge(f"entities: at most {lim.fields_total} fields in all, got {total}")
    index: dict[str, int] = {}
    for i, entity in enumerate(entities):
        if entity.name in index:
            raise DiagramInvalid(f"entities[{i}].name: duplicate entity name {entity.name!r}")
        index[entity.name] = i
    raw_relations = read_list(
        top.get("relations", []), "relations", min_items=0, max_items=lim.relations
    )
    relations = tuple(
        _relation(raw, f"relations[{i}]", lim, index) for i, raw in enumerate(raw_relations)
    )
    return ErDiagram(title=title, entities=entities, relations=relations)


def _entity(raw: object, path: str, lim: ErLimits) -> Entity:
    item = read_mapping(raw, path, required=("name",), optional=("fields",))
    name = read_text(item["name"], f"{path}.name", max_chars=lim.name_chars)
    raw_fields = read_list(
        item.get("fields", []), f"{path}.fields", min_items=0, max_items=lim.fields_per_entity
    )
    fields = tuple(_field(f, f"{path}.fields[{j}]", lim) for j, f in enumerate(raw_fields))
    seen: set[str] = set()
    for j, field in enumerate(fields):
        if field.name in seen:
            raise DiagramInvalid(f"{path}.fields[{j}].name: duplicate field {field.name!r}")
        seen.add(field.name)
    return Entity(name=name, fields=fields)


def _field(raw: object, path: str, lim: ErLimits) -> Field:
    item = read_mapping(raw, path, required=("name",), optional=("type", "key"))
    name = read_text(item["name"], f"{path}.name", max_chars=lim.name_chars)
    ftype = read_text(
        item.get("type", ""), f"{path}.type", max_chars=lim.type_chars, allow_empty=True
    )
    key = item.get("key")
    if key is not None:
        key = read_choice(key, f"{path}.key", KEY_ROLES)
    return Field(name=name, type=ftype, key=key)


def _relation(raw: object, path: str, lim: ErLimits, index: dict[str, int]) -> Relation:
    item = read_mapping(raw, path, required=("from", "to", "cardinality"), optional=("label",))
    ends: list[int] = []
    for end in ("from", "to"):
        name = read_text(item[end], f"{path}.{end}", max_chars=lim.name_chars)
        if name not in index:
            raise DiagramInvalid(f"{path}.{end}: no entity named {name!r}")
        ends.append(index[name])
    if ends[0] == ends[1]:
        raise DiagramInvalid(
            f"{path}: self-relations are not drawn; show the key as an fk field instead"
        )
    cardinality = read_choice(item["cardinality"], f"{path}.cardinality", CARDINALITIES)
    label = read_text(
        item.get("label", ""), f"{path}.label", max_chars=lim.label_chars, allow_empty=True
    )
    return Relation(source=ends[0], target=ends[1], cardinality=cardinality, label=label)
