"""The ``strategies`` plugin: discovered through its entry point, cheap to import."""

from importlib.metadata import metadata

from mtb.testing import PluginPackageTests

DISTRIBUTION = "mtb-strategies"


class TestPlugin(PluginPackageTests):
    entry_point = "strategies"
    distribution = DISTRIBUTION
    package = "mtb_strategies"


def test_declares_the_deepspeed_extra():
    meta = metadata(DISTRIBUTION)
    assert "deepspeed" in meta.get_all("Provides-Extra")
    requirements = [r.replace(" ", "") for r in meta.get_all("Requires-Dist")]
    assert any(
        r.startswith("deepspeed>=0.15;") and 'extra=="deepspeed"' in r for r in requirements
    ), requirements
