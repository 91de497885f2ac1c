"""Installed next to broken plugin distributions, mtb and the example keep working.

Two real distributions are built and installed here (pip, into a folder on
PYTHONPATH, so their entry points are found like any installed plugin's):
one registers a strategy under a built-in's name, one has an observer that
raises and a module that fails to import. Run by ``nox -s plugin_example``.
"""

import json
import subprocess
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path

import pytest
from test_installed_plugin import STRATEGY, TIMEOUT_S
from test_installed_plugin import mtb as installed_mtb

CLASHING = """
from mtb.api import Strategy, hookimpl


class Impostor(Strategy):
    name = "single"


@hookimpl
def mtb_register_strategies(register):
    register(Impostor())
"""
OBSERVER = """
from mtb.api import hookimpl


@hookimpl
def mtb_step_end(metrics):
    if metrics.step == 2:
        raise KeyError("x")
"""


def distribution(root: Path, name: str, plugins: dict[str, str]) -> Path:
    """A source tree of distribution ``name``: one module per entry point of ``plugins``."""
    folder = root / name
    package = folder / name.replace("-", "_")
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    points = []
    for entry, code in plugins.items():
        (package / f"{entry}.py").write_text(code)
        points.append(f'{entry} = "{package.name}.{entry}"')
    (folder / "pyproject.toml").write_text(
        textwrap.dedent(f"""\
            [build-system]
            requires = ["setuptools"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "{name}"
            version = "1.0"

            [project.entry-points.mtb]
            """)
        + "\n".join(points)
        + "\n"
    )
    return folder


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """Both distributions installed into one folder that PYTHONPATH adds."""
    root = tmp_path_factory.mktemp("neighbours")
    sources = [
        distribution(root, "mtb-clashing-plugin", {"clashing": CLASHING}),
        distribution(
            root,
            "mtb-broken-plugins",
            {"raising_observer": OBSERVER, "unimportable": "import no_such_module_anywhere\n"},
        ),
    ]
    target = root / "site"
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
    command += ["--no-build-isolation", "--target", str(target), *map(str, sources)]
    subprocess.run(command, check=True, timeout=TIMEOUT_S, capture_output=True)
    return target


def mtb(site: Path, *args) -> subprocess.CompletedProcess:
    return installed_mtb(*args, pythonpath=str(site))


def warnings(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("mtb: warning:")]


def test_every_command_works_and_each_broken_plugin_is_one_warning(site, tmp_path):
    clash = (
        "mtb: warning: plugin 'clashing' is skipped: strategy 'single' is registered by both "
        f"'mtb.strategies.single' (mtb-core {version('mtb-core')}) and 'clashing' "
        "(mtb-clashing-plugin 1.0)"
    )
    for args in (["--help"], ["--version"], ["plugins", "--json"]):
        proc = mtb(site, *args)
        assert proc.returncode == 0, proc.stderr
        found = warnings(proc)
        assert len(found) == 2, found  # the clash and the module that does not import
        assert any(line.startswith(clash) for line in found), found
        assert any("'unimportable' failed to load" in line for line in found), found
    listed = {entry["name"]: entry for entry in json.loads(mtb(site, "plugins", "--json").stdout)}
    assert listed["example"]["registers"]["strategies"][0]["name"] == STRATEGY
    tiny = ["--preset", "tiny", "--steps", "2", "--warmup-steps", "1"]
    tiny += ["--output", tmp_path / "single.json"]
    single = mtb(site, "run", "--strategy", "single", *tiny)
    assert single.returncode == 0, single.stderr


def test_a_raising_observer_names_its_plugin_and_the_run_keeps_its_steps(site, tmp_path):
    out = tmp_path / "r.json"
    args = ["run", "--strategy", STRATEGY, "--preset", "tiny", "--steps", "4"]
    proc = mtb(site, *args, "--warmup-steps", "1", "--nproc-per-node", "2", "--output", out)
    assert proc.returncode == 1, proc.stderr
    assert len(warnings(proc)) == 2, proc.stderr  # once per run, not once per process
    doc = json.loads(out.read_text())
    assert [s["step"] for s in doc["trials"][0]["steps"]] == [1, 2, 3]
    assert doc["plugin_failures"] == [
        {
            "plugin": "raising_observer",
            "hook": "mtb_step_end",
            "error": "KeyError: 'x'",
            "ranks": [0, 1],
        }
    ]
    assert "mtb_step_end of plugin raising_observer failed on rank(s) 0, 1" in proc.stderr
    assert "rank 0 failed" not in proc.stderr
