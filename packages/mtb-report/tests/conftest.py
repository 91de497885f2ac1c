"""Shared fixtures: result documents from real mtb runs, the CLI, golden files."""

import copy
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from mtb.cli import make_cli
from mtb.plugins import build_plugin_manager

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
    """A copy of a fixture with dotted-path fields replaced (``provenance.torch="2.9"``)."""
    document = copy.deepcopy(run_document(name))
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        target = document
        for key in parents:
            target = target[key]
        target[last] = value
    return document


def check_golden(name: str, text: str) -> None:
    """Compare with the golden file; ``UPDATE_GOLDEN=1`` rewrites it instead."""
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs; regenerate with UPDATE_GOLDEN=1"


@pytest.fixture(scope="session")
def cli():
    return make_cli(build_plugin_manager())


@pytest.fixture
def invoke(cli):
    def run(*args):
        return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)

    return run
