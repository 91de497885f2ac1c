"""The ``megatron`` plugin: discovered through its entry point, cheap to import."""

from importlib.metadata import metadata

from mtb.testing import PluginPackageTests

DISTRIBUTION = "mtb-megatron"


class TestPlugin(PluginPackageTests):
    entry_point = "megatron"
    distribution = DISTRIBUTION
    package = "mtb_megatron"


def test_declares_the_megatron_core_and_gpu_extras():
    meta = metadata(DISTRIBUTION)
    assert {"megatron-core", "gpu"} <= set(meta.get_all("Provides-Extra"))
    requirements = [r.replace(" ", "") for r in meta.get_all("Requires-Dist")]
    for name, extra in (("megatron-core", "megatron-core"), ("nvidia-ml-py", "gpu")):
        assert any(r.startswith(name) and f'extra=="{extra}"' in r for r in requirements), name
