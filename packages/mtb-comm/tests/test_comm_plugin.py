"""The ``comm`` plugin: discovered through its entry point, cheap to import."""

import os
import subprocess
import sys
from importlib.metadata import version

import pytest

import mtb_comm
import mtb_comm.plugin
from mtb.plugins import build_plugin_manager

PLUGIN = "comm"
DISTRIBUTION = "mtb-comm"


@pytest.fixture
def pm(monkeypatch):
    """A plugin manager over what is installed, unfiltered by the caller's environment."""
    monkeypatch.delenv("MTB_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("MTB_PLUGIN_MODULES", raising=False)
    return build_plugin_manager()


def test_registered_under_its_entry_point_name(pm):
    assert pm.get_plugin(PLUGIN) is mtb_comm.plugin
    info = pm.info(PLUGIN)
    assert info.name == PLUGIN
    assert info.distribution == DISTRIBUTION
    assert info.version == version(DISTRIBUTION)
    assert not info.builtin
    assert PLUGIN in [i.name for i in pm.plugin_infos()]


def test_package_version_matches_distribution():
    assert mtb_comm.__version__ == version(DISTRIBUTION)


def test_load_plugins_allow_list_excludes_it(monkeypatch):
    monkeypatch.setenv("MTB_LOAD_PLUGINS", "")
    monkeypatch.delenv("MTB_PLUGIN_MODULES", raising=False)
    pm = build_plugin_manager()
    assert pm.get_plugin(PLUGIN) is None
    assert "mtb.strategies.single" in [name for name, _ in pm.list_name_plugin()]


def test_import_and_discovery_do_not_import_torch():
    code = (
        "import sys\n"
        "import mtb_comm, mtb_comm.plugin\n"
        "from mtb.plugins import build_plugin_manager\n"
        "pm = build_plugin_manager()\n"
        "assert pm.get_plugin('comm') is not None, 'plugin not loaded'\n"
        "pm.registry('strategy'); pm.registry('reporter')\n"
        "loaded = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
        "assert not loaded, loaded\n"
    )
    env = {**os.environ, "MTB_LOAD_PLUGINS": PLUGIN}
    env.pop("MTB_PLUGIN_MODULES", None)
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
