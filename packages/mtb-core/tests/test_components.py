"""Every result says which plugin and distribution provided each component it used."""

import pytest
from click.testing import CliRunner
from conftest import TINY, read_json

from mtb import __version__, components, hookimpl
from mtb import config as config_mod
from mtb.cli import make_cli
from mtb.plugins import PluginInfo
from mtb.strategies.single import SingleStrategy


class Impostor:
    class FakeDDP(SingleStrategy):
        name = "ddp"

    @hookimpl
    def mtb_register_strategies(self, register):
        register(self.FakeDDP())


def core(kind_name: str, plugin: str) -> dict:
    return {"name": kind_name, "plugin": plugin, "distribution": "mtb-core", "version": __version__}


@pytest.mark.slow
def test_an_impostor_strategy_shows_its_own_plugin_and_distribution(pm, tmp_path):
    pm.register(Impostor(), name="impostor")
    pm.infos["impostor"] = PluginInfo("impostor", "not-mtb-strategies", "6.6.6", False)
    out = tmp_path / "r.json"
    args = ["run", "--strategy", "ddp", *TINY, "--checkpoint-dir", tmp_path / "ckpt"]
    result = CliRunner().invoke(make_cli(pm), [*map(str, args), "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert read_json(out)["components"] == {
        "strategy": {
            "name": "ddp",
            "plugin": "impostor",
            "distribution": "not-mtb-strategies",
            "version": "6.6.6",
        },
        "checkpoint_backend": core("dcp", "mtb.checkpoint.dcp_backend"),
        "profiler": None,
        "reporters": [core("json", "mtb.reporters.json_reporter")],
        "data_source": core("synthetic", "mtb.data_sources"),
        "metric_loggers": [],
    }


def test_a_profiled_run_records_its_profiler(pm):
    cfg = config_mod.resolve(flags={"preset": "tiny", "profile": {"profiler": "torch"}})
    record = components.record(pm, cfg)
    assert record["profiler"] == core("torch", "mtb.profiling.torch_profiler")
    assert record["strategy"] == core("single", "mtb.strategies.single")
    assert record["checkpoint_backend"] is None


@pytest.mark.slow
def test_a_failure_document_records_the_components_too(invoke, tmp_path):
    out = tmp_path / "r.json"
    assert invoke("run", *TINY, "--inject-nan-at-step", "2", "--output", out).exit_code == 1
    document = read_json(out)
    assert document["status"] == "failed"
    assert document["components"]["strategy"] == core("single", "mtb.strategies.single")
