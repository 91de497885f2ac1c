"""Reusable checks for plugin distributions' own test suites.

A plugin package subclasses :class:`PluginPackageTests` in its tests and
names its entry point, distribution and package; pytest collects the
inherited tests (like pytest's own plugin-testing helpers).
"""

import importlib
import os
import subprocess
import sys
from importlib.metadata import version

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
        assert pm.get_plugin(self.entry_point) is importlib.import_module(f"{self.package}.plugin")
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
