"""Reusable checks and fixtures for plugin distributions' own test suites.

A plugin package subclasses :class:`PluginPackageTests` in its tests and
names its entry point, distribution and package; pytest collects the
inherited tests (like pytest's own plugin-testing helpers). The
:func:`mtb_plugin` fixture runs ``mtb`` with a plugin module registered only
for the test, on one rank or several: launched workers load it too.
"""

import importlib
import json
import os
import subprocess
import sys
import sysconfig
from importlib.metadata import version
from pathlib import Path
from types import ModuleType

import attrs
import pytest

from mtb.plugins import build_plugin_manager

NO_TORCH = """
import sys
import {package}, {package}.plugin
from mtb.plugins import build_plugin_manager
pm = build_plugin_manager()
assert pm.get_plugin({entry_point!r}) is not None, "plugin not loaded"
for kind in ("strategy", "checkpoint_backend", "profiler", "reporter"):
    pm.registry(kind)
loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
assert not loaded, loaded
"""


class PluginPackageTests:
    """Discovery, attribution, allow-list and lazy-import checks of one plugin package."""

    entry_point = ""
    distribution = ""
    package = ""
    #: the module the entry point names; empty: ``<package>.plugin``
    module = ""

    def _manager(self, allow: str | None = None):
        saved = {k: os.environ.pop(k, None) for k in ("MTB_LOAD_PLUGINS", "MTB_PLUGIN_MODULES")}
        if allow is not None:
            os.environ["MTB_LOAD_PLUGINS"] = allow
        try:
            return build_plugin_manager()
        finally:
            os.environ.pop("MTB_LOAD_PLUGINS", None)
            os.environ.update({k: v for k, v in saved.items() if v is not None})

    def test_registered_under_its_entry_point_with_its_distribution(self):
        pm = self._manager()
        module = self.module or f"{self.package}.plugin"
        assert pm.get_plugin(self.entry_point) is importlib.import_module(module)
        info = pm.info(self.entry_point)
        assert (info.name, info.distribution) == (self.entry_point, self.distribution)
        assert info.version == version(self.distribution) and not info.builtin

    def test_package_version_matches_distribution(self):
        assert importlib.import_module(self.package).__version__ == version(self.distribution)

    def test_load_plugins_allow_list_excludes_it(self):
        pm = self._manager(allow="")
        assert pm.get_plugin(self.entry_point) is None
        assert "mtb.strategies.single" in [name for name, _ in pm.list_name_plugin()]

    def test_import_and_discovery_do_not_import_torch(self):
        code = NO_TORCH.format(package=self.package, entry_point=self.entry_point)
        env = {**os.environ, "MTB_LOAD_PLUGINS": self.entry_point}
        env.pop("MTB_PLUGIN_MODULES", None)
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr


@attrs.frozen
class PluginRun:
    """One ``mtb run`` of :class:`PluginRunner`: exit code, output, and the result document."""

    exit_code: int
    output: str
    document: dict | None


def _import_root(module: ModuleType) -> str:
    """The directory that makes ``module`` importable by its dotted name."""
    assert module.__file__ is not None, f"{module.__name__} is not a file: it cannot be launched"
    path = Path(module.__file__)
    depth = module.__name__.count(".") + (path.stem == "__init__")
    return str(path.parents[depth])


class PluginRunner:
    """``mtb`` over core's built-ins plus one plugin module, in this process and in workers.

    The CLI runs over a fresh plugin manager (no installed plugins) with the
    module registered under its dotted name. A run that starts workers (any
    world size above 1, and one rank of a strategy without ``max_world_size
    = 1``) gets the same set there: MTB_PLUGIN_MODULES names the module,
    MTB_LOAD_PLUGINS is empty and PYTHONPATH reaches it.
    """

    def __init__(self, module: ModuleType | str, directory: Path, monkeypatch):
        from mtb.cli import make_cli

        if isinstance(module, str):
            module = importlib.import_module(module)
        self.name = module.__name__
        self.directory = Path(directory)
        self.pm = build_plugin_manager(load_entry_points=False)
        self.pm.register(module, name=self.name)
        self.cli = make_cli(self.pm)
        monkeypatch.setenv("MTB_PLUGIN_MODULES", self.name)
        monkeypatch.setenv("MTB_LOAD_PLUGINS", "")
        root = _import_root(module)
        if root not in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
            paths = [root, *filter(None, [os.environ.get("PYTHONPATH")])]
            monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))

    def invoke(self, *args):
        """Any ``mtb`` command line over this plugin manager; click's Result."""
        from click.testing import CliRunner

        return CliRunner().invoke(self.cli, [str(a) for a in args])

    def run(self, *args, nproc_per_node: int = 1) -> PluginRun:
        """``mtb run ARGS`` on CPU with ``nproc_per_node`` ranks and a fresh --output."""
        output = self.directory / f"result-{len(list(self.directory.glob('result-*')))}.json"
        ranks = ["--device", "cpu", "--nproc-per-node", nproc_per_node, "--timeout", 240]
        result = self.invoke("run", *ranks, *args, "--output", output)
        document = json.loads(output.read_text()) if output.exists() else None
        return PluginRun(result.exit_code, result.output, document)


@pytest.fixture
def mtb_plugin(tmp_path, monkeypatch):
    """``mtb_plugin(module)``: a :class:`PluginRunner` for a plugin module (or its dotted name).

    Import it into your ``conftest.py`` (``from mtb.testing import mtb_plugin``);
    the environment variables it sets are undone after the test.
    """

    def runner(module: ModuleType | str) -> PluginRunner:
        return PluginRunner(module, tmp_path / "mtb-plugin-runs", monkeypatch)

    return runner


def longest_first(items: list, files: tuple[str, ...]) -> None:
    """Put the collected tests of ``files`` (file names, longest first) before the rest.

    Call it from ``pytest_collection_modifyitems``. Under pytest-xdist's
    ``--dist loadfile`` each worker takes the next whole file in collection
    order (with ``--no-loadscope-reorder``; by default xdist orders files by
    how many tests they hold): the longest start first and the short ones fill
    in around them, instead of one long file trailing on one worker at the end.
    """
    first = {name: index for index, name in enumerate(files)}
    items.sort(key=lambda item: first.get(item.path.name, len(files)))
