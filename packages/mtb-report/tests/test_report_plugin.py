"""The ``report`` plugin: discovered through its entry point, cheap to import."""

from mtb.testing import PluginPackageTests

DISTRIBUTION = "mtb-report"


class TestPlugin(PluginPackageTests):
    entry_point = "report"
    distribution = DISTRIBUTION
    package = "mtb_report"
