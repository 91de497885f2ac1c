"""The ``megatron`` plugin: discovered through its entry point, cheap to import."""

from importlib.metadata import metadata

from mtb.testing import PluginPackageTests

DISTRIBUTION = "mtb-megatron"


class TestPlugin(PluginPackageTests):
    entry_point = "megatron"
    distribution = DISTRIBUTION
    package = "mtb_megatron"


def test_declares_the_megatron_core_extra():
    meta = metadata(DISTRIBUTION)
    assert "megatron-core" in meta.get_all("Provides-Extra")
    requirements = [r.replace(" ", "") for r in meta.get_all("Requires-Dist")]
    assert any(
        r.startswith("megatron-core;") and 'extra=="megatron-core"' in r for r in requirements
    ), requirements
