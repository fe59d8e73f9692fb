"""Every generated .tldr validates under tldraw's own MIT schema packages (Node)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hosts.tldraw.engine import render_er, render_sequence
from hosts.tldraw.examples import er_example, sequence_example
from hosts.tldraw.tldr import index_key

VALIDATE_DIR = Path(__file__).resolve().parents[3] / "hosts" / "tldraw" / "validate"
SCRIPT = VALIDATE_DIR / "validate-tldr.cjs"
Doc = dict[str, Any]


@pytest.fixture(scope="module")
def node_ready() -> Path:
    """The validator's node_modules, installed with `npm ci` if CI has not done it."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node/npm not installed")
    if not (VALIDATE_DIR / "node_modules" / "@tldraw" / "tlschema").is_dir():
        subprocess.run(
            ["npm", "ci", "--omit=peer", "--no-audit", "--no-fund"],
            cwd=VALIDATE_DIR,
            check=True,
            capture_output=True,
            timeout=55,
        )
    return VALIDATE_DIR


def _validate(tmp_path: Path, docs: dict[str, str]) -> subprocess.CompletedProcess[str]:
    paths = []
    for name, text in docs.items():
        path = tmp_path / f"{name}.tldr"
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    return subprocess.run(
        ["node", str(SCRIPT), "--strict", *paths],
        cwd=VALIDATE_DIR,
        capture_output=True,
        text=True,
        timeout=30,
    )


GENERATED: dict[str, Callable[[], str]] = {
    "er1": lambda: render_er({"entities": [{"name": "lonely"}]}).tldr,
    "er5": lambda: render_er(er_example(5)).tldr,
    "er20": lambda: render_er(er_example(20)).tldr,
    "er40": lambda: render_er(er_example(40)).tldr,
    "er_parallel": lambda: render_er({
        "title": "Tickets",
        "entities": [{"name": "users", "fields": [{"name": "id", "key": "pk"}]},
                     {"name": "tickets", "fields": [{"name": "opened_by", "key": "fk"}]}],
        "relations": [
            {"from": "users", "to": "tickets", "cardinality": "one_to_many", "label": "opened"},
            {"from": "tickets", "to": "users", "cardinality": "many_to_one", "label": "assignee"},
            {"from": "users", "to": "tickets", "cardinality": "many_to_many"},
        ],
    }).tldr,
    "er_hostile": lambda: render_er({
        "title": "<b>&amp;</b> \"quotes\" 'single' ]]> ünïcödé",
        "entities": [{"name": "<script>", "fields": [{"name": "x", "type": "a&b"}]}],
    }).tldr,
    "sequence": lambda: render_sequence(sequence_example()).tldr,
    "sequence_untitled": lambda: render_sequence({
        "participants": [{"name": "solo"}],
        "messages": [{"from": "solo", "to": "solo", "text": "think", "kind": "async"}],
    }).tldr,
}


def test_every_generated_document_validates(node_ready: Path, tmp_path: Path) -> None:
    """Each generated ER and sequence document passes tldraw's migrations, validators and integrity checks."""
    docs = {name: make() for name, make in GENERATED.items()}
    result = _validate(tmp_path, docs)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("ok ") == len(docs)


def _corrupt(doc: Doc, how: str) -> Doc:
    records = doc["records"]
    geo = next(r for r in records if r.get("type") == "geo")
    binding = next(r for r in records if r["typeName"] == "binding")
    match how:
        case "zero_width":
            geo["props"]["w"] = 0
        case "bad_colour":
            geo["props"]["color"] = "purple"
        case "unknown_prop":
            geo["props"]["shadow"] = True
        case "bad_index":
            geo["index"] = "!!"
        case "dangling_binding":
            binding["toId"] = "shape:nowhere"
        case "missing_page":
            geo["parentId"] = "page:nowhere"
        case "too_new_sequence":
            doc["schema"]["sequences"]["com.tldraw.shape.geo"] = 99
        case "undeclared_sequence":
            del doc["schema"]["sequences"]["com.tldraw.shape.arrow"]
        case "newer_format":
            doc["tldrawFileFormatVersion"] = 2
        case "duplicate_id":
            records.append(dict(geo))
        case "double_binding":
            records.append(dict(binding, id="binding:extra"))
    return doc


@pytest.mark.parametrize(
    "how",
    ["zero_width", "bad_colour", "unknown_prop", "bad_index", "dangling_binding",
     "missing_page", "too_new_sequence", "undeclared_sequence", "newer_format",
     "duplicate_id", "double_binding"],
)
def test_corrupted_document_is_rejected(node_ready: Path, tmp_path: Path, how: str) -> None:
    """A generated document with one corruption is rejected by the validator."""
    doc = _corrupt(json.loads(render_er(er_example(3)).tldr), how)
    result = _validate(tmp_path, {how: json.dumps(doc)})
    assert result.returncode == 1, result.stdout
    assert "invalid" in result.stderr


def test_truncated_document_is_rejected(node_ready: Path, tmp_path: Path) -> None:
    """A truncated file is rejected as not JSON."""
    text = render_er(er_example(3)).tldr
    result = _validate(tmp_path, {"truncated": text[: len(text) // 2]})
    assert result.returncode == 1
    assert "not JSON" in result.stderr


def test_document_structure_matches_the_layout() -> None:
    """The ER document has one geo per entity, one arrow per relation, two bindings each."""
    spec = er_example(7)
    doc = json.loads(render_er(spec).tldr)
    records = doc["records"]
    kinds = [r.get("type") for r in records if r["typeName"] == "shape"]
    assert kinds.count("geo") == len(spec["entities"])
    assert kinds.count("arrow") == len(spec["relations"])
    assert sum(r["typeName"] == "binding" for r in records) == 2 * len(spec["relations"])
    assert doc["tldrawFileFormatVersion"] == 1


def test_index_keys_are_ordered_and_valid() -> None:
    """Generated index keys sort in order and never end a fraction with zero."""
    keys = [index_key(i) for i in range(5000)]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)
    assert keys[0] == "a1" and keys[60] == "az" and keys[61] == "b00"
