"""Core's layers do not reach back: each module imports only layers below it.

contracts and config -> model, data, metrics, results -> checkpoint ->
trainer and engines -> launch -> run orchestration -> CLI (docs/concepts.md).
The rules are read from the sources with ``ast``, lazy imports included.
"""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "mtb"

#: (modules, by path under src/mtb) -> the mtb modules they must not import (prefixes)
RULES = {
    "checkpoint": ("mtb.trainer", "mtb.worker", "mtb.launcher", "mtb.launch", "mtb.cli"),
    "matrix": ("mtb.cli",),
    "launch.py": (
        "mtb.launcher",
        "mtb.worker",
        "mtb.trainer",
        "mtb.cli",
        "mtb.matrix",
        "mtb.fault",
        "mtb.checkpoint_compare",
    ),
    "flags.py": ("mtb.cli",),
}


def imported_modules(source: str) -> set[str]:
    """Every ``mtb...`` module a source imports (``from mtb import x`` counts as mtb.x)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "mtb":
                found.update(f"mtb.{a.name}" for a in node.names)
            else:
                found.add(node.module)
    return {name for name in found if name == "mtb" or name.startswith("mtb.")}


def reaches(module: str, forbidden: tuple[str, ...]) -> bool:
    return any(module == f or module.startswith(f"{f}.") for f in forbidden)


def test_the_rule_sees_lazy_and_aliased_imports():
    source = "def f():\n    from mtb import launcher as l\n    import mtb.worker\n"
    assert imported_modules(source) == {"mtb.launcher", "mtb.worker"}
    assert reaches("mtb.cli.config_options", ("mtb.cli",))
    assert not reaches("mtb.launcher", ("mtb.launch",))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", sorted(RULES))
def test_lower_layers_do_not_import_upper_ones(where):
    root = SRC / where
    files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
    assert files, f"{where} has no sources"
    offending = [
        f"{path.relative_to(SRC)}: {module}"
        for path in files
        for module in sorted(imported_modules(path.read_text()))
        if reaches(module, RULES[where])
    ]
    assert not offending, "a lower layer reaches up:\n" + "\n".join(offending)
