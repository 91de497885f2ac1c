"""Helpers of the report tests: result documents from real mtb runs, golden files.

A module of its own (not conftest) so that its name never clashes with another
test suite's conftest when several run in one pytest session.
"""

import copy
import json
import os
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
RUNS = FIXTURES / "runs"
GOLDEN = FIXTURES / "golden"


def run_document(name: str) -> dict:
    return json.loads((RUNS / name).read_text())


def write(path: Path, document: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


def variant(name: str, **changes) -> dict:
    """A fixture copy with nested fields replaced; ``__`` joins keys (``provenance__torch``)."""
    document = copy.deepcopy(run_document(name))
    for path, value in changes.items():
        *parents, last = path.split("__")
        target = document
        for key in parents:
            target = target[key]
        target[last] = value
    return document


def other_kind(kind: str, **fields) -> dict:
    """A document of another package's kind, in the shape mtb-comm writes (frame + fields)."""
    frame = run_document("ddp-w2.json")
    keep = ("schema_version", "status", "error", "plugins", "provenance")
    return {"kind": kind, **{k: frame[k] for k in keep}, "config": {}, **fields}


def check_golden(name: str, text: str) -> None:
    """Compare with the golden file; ``UPDATE_GOLDEN=1`` rewrites it instead."""
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs; regenerate with UPDATE_GOLDEN=1"
