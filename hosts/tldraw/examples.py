"""Ready-made requests: for benchmarks, probes (``clankiectl doctor``) and tests.

They are plain dicts shaped exactly like tool input, so they go through the
same validation as anything the captain sends.
"""

from __future__ import annotations

from typing import Any

__all__ = ["er_example", "sequence_example"]

_TYPES = ("uuid", "text", "int", "timestamptz", "bool", "jsonb")


def er_example(entities: int = 5) -> dict[str, Any]:
    """A schema-like ER request with ``entities`` tables and about 1.1 relations each.

    Entity ``i`` references entity ``i // 2`` (a tree) and every fifth one also
    references its neighbour, so the layout has hubs, chains and cycles.
    """
    items: list[dict[str, Any]] = []
    relations: list[dict[str, Any]] = []
    for i in range(entities):
        fields: list[dict[str, Any]] = [{"name": "id", "type": "uuid", "key": "pk"}]
        if i:
            fields.append({"name": f"table_{i // 2}_id", "type": "uuid", "key": "fk"})
            relations.append(
                {"from": f"table_{i // 2}", "to": f"table_{i}", "cardinality": "one_to_many"}
            )
        if i % 5 == 4 and i + 1 < entities:
            relations.append(
                {"from": f"table_{i}", "to": f"table_{i + 1}", "cardinality": "many_to_many",
                 "label": "links"}
            )
        for k in range(i % 4):
            fields.append({"name": f"column_{k}", "type": _TYPES[(i + k) % len(_TYPES)]})
        items.append({"name": f"table_{i}", "fields": fields})
    return {"title": f"{entities} tables", "entities": items, "relations": relations}


def sequence_example() -> dict[str, Any]:
    """A small sequence request that uses every message kind and a self-message."""
    return {
        "title": "Checkout",
        "participants": [{"name": "Client"}, {"name": "API"}, {"name": "Payments"}],
        "messages": [
            {"from": "Client", "to": "API", "text": "POST /checkout", "kind": "sync"},
            {"from": "API", "to": "API", "text": "validate cart"},
            {"from": "API", "to": "Payments", "text": "charge(card, amount)"},
            {"from": "Payments", "to": "API", "text": "charge id", "kind": "reply"},
            {"from": "API", "to": "Payments", "text": "receipt email", "kind": "async"},
            {"from": "API", "to": "Client", "text": "201 Created", "kind": "reply"},
        ],
    }
