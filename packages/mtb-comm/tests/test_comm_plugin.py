"""The ``comm`` plugin: discovered through its entry point, cheap to import."""

from mtb.testing import PluginPackageTests

DISTRIBUTION = "mtb-comm"


class TestPlugin(PluginPackageTests):
    entry_point = "comm"
    distribution = DISTRIBUTION
    package = "mtb_comm"
