"""Plugins, sibling packages, the example plugin and the benchmarks import only ``mtb.api``.

Every other module of ``mtb`` is internal: a package that reached into one
would break on the next refactor of core. The rule is read from the source
with ``ast`` (no imports run), so it also covers code behind lazy imports.
"""

import ast

import pytest
from conftest import ROOT

#: every tree outside mtb-core that must keep to the public API
TREES = (
    "packages/mtb-strategies/src",
    "packages/mtb-comm/src",
    "packages/mtb-megatron/src",
    "packages/mtb-report/src",
    "packages/mtb-loggers/src",
    "packages/mtb-plan/src",
    "examples/mtb-example-strategy/src",
    "benchmarks",
)


def core_imports(source: str) -> list[tuple[int, str]]:
    """(line, what) for each import of ``mtb`` other than ``mtb.api``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            base = node.module
            names = [f"{base}.{a.name}" if base == "mtb" else base for a in node.names]
        else:
            continue
        found += [
            (node.lineno, name)
            for name in names
            if (name == "mtb" or name.startswith("mtb.")) and name != "mtb.api"
        ]
    return found


def test_the_rule_sees_every_way_of_reaching_into_core():
    source = (
        "import mtb.worker\nfrom mtb import provenance\nfrom mtb.cli import x\n"
        "from mtb.api import hookimpl\nfrom mtb import api\nimport mtb_comm.cli\n"
        "def f():\n    from mtb.launcher import run_function\n"
    )
    assert [what for _, what in core_imports(source)] == [
        "mtb.worker",
        "mtb.provenance",
        "mtb.cli",
        "mtb.launcher",
    ]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("tree", TREES)
def test_packages_outside_core_import_only_mtb_api(tree):
    files = sorted((ROOT / tree).rglob("*.py"))
    assert files, f"{tree} has no Python files"
    offending = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in files
        for line, what in core_imports(path.read_text())
    ]
    assert not offending, "import mtb.api instead of:\n" + "\n".join(offending)


@pytest.mark.timeout(60)
def test_every_public_name_resolves_and_importing_the_api_needs_no_torch():
    import subprocess
    import sys

    check = (
        "import sys, mtb.api as api\n"
        "assert 'torch' not in sys.modules, 'mtb.api imported torch'\n"
        "missing = [n for n in api.__all__ if not hasattr(api, n)]\n"
        "assert not missing, missing\n"
        "print('API-OK')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=60, check=False
    )
    assert "API-OK" in done.stdout, done.stderr


def test_unknown_public_names_are_refused():
    import mtb.api

    with pytest.raises(AttributeError, match="no attribute 'worker'"):
        mtb.api.worker  # noqa: B018
