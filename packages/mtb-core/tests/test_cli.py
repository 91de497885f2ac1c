"""The CLI driven in-process through click's CliRunner over a test plugin manager."""

import json

import attrs
import pytest
from conftest import TINY, read_json

from mtb import __version__, hookimpl
from mtb.config import SECTIONS, RunConfig
from mtb.strategy import Strategy


def test_help_and_version(invoke):
    result = invoke("--help")
    assert result.exit_code == 0
    assert "run" in result.output and "plugins" in result.output
    assert invoke("--version").output.strip() == f"mtb {__version__}"


def test_run_help_lists_every_config_field_with_default_and_unit(invoke):
    text = " ".join(invoke("run", "--help").output.split())
    fields = [f for f in attrs.fields(RunConfig) if not f.metadata.get("section")]
    fields += [f for cls in SECTIONS.values() for f in attrs.fields(cls)]
    for field in fields:
        flag = field.metadata.get("flag") or "--" + field.name.replace("_", "-")
        assert flag in text, flag
    assert "--steps INTEGER optimizer steps of the run, warmup included" in text
    assert (
        "--timeout FLOAT wall-clock limit of the launch "
        "[default: 1800.0; unit: s; allowed: 1 to 2592000.0]"
    ) in text
    assert (
        "--d-model INTEGER hidden size [default: from preset; unit: features; allowed: 1 to 131072]"
    ) in text
    assert "--precision [fp32|bf16|fp16]" in text


def test_plugins_table_and_json(invoke):
    table = invoke("plugins")
    assert table.exit_code == 0
    assert "mtb.strategies.single" in table.output and "mtb-core" in table.output
    entries = json.loads(invoke("plugins", "--json").output)
    single = next(e for e in entries if e["name"] == "mtb.strategies.single")
    assert single["distribution"] == "mtb-core" and single["version"] == __version__
    assert single["hooks"] == ["mtb_register_strategies"]
    assert single["registers"] == {
        "strategies": [{"name": "single", "available": True, "unavailable_reason": None}]
    }


class Unavailable:
    class Zero(Strategy):
        name = "zero9"
        requires = ("surely_not_installed_module",)
        install_hint = "pip install mtb-strategies[deepspeed]"

    @hookimpl
    def mtb_register_strategies(self, register):
        register(self.Zero())


def test_unavailable_strategy_is_listed_with_hint_and_refused(pm, invoke):
    pm.register(Unavailable(), name="unavailable-plugin")
    try:
        listing = invoke("plugins").output
        assert "zero9 (unavailable)" in listing
        assert "install with: pip install mtb-strategies[deepspeed]" in listing
        result = invoke("run", "--strategy", "zero9", *TINY)
        assert result.exit_code == 2
        assert result.output.strip() == (
            "Error: strategy 'zero9' is unavailable: needs surely_not_installed_module; "
            "install with: pip install mtb-strategies[deepspeed]"
        )
    finally:
        pm.unregister(name="unavailable-plugin")


def test_unknown_strategy_exits_2_listing_installed(invoke):
    result = invoke("run", "--strategy", "ddp", *TINY)
    assert result.exit_code == 2
    assert result.output.strip() == "Error: unknown strategy 'ddp'; installed: single"


def test_config_errors_exit_2_with_one_line(invoke, tmp_path):
    result = invoke("run", "--preset", "tiny", "--d-model", "33")
    assert (result.exit_code, result.output.strip()) == (
        2,
        "Error: model.d_model: 33 must be divisible by model.n_heads=2",
    )
    toml = tmp_path / "run.toml"
    toml.write_text('[training]\nprecision = "fp8"\n')
    result = invoke("run", "--config", toml)
    assert result.exit_code == 2
    assert result.output.strip() == (
        "Error: training.precision: 'fp8' is not one of: fp32, bf16, fp16"
    )
    assert invoke("run", "--steps", "0").exit_code == 2
    assert invoke("run", "--precision", "fp8").exit_code == 2  # click's own choice check


def test_single_refuses_more_than_one_process(invoke, tmp_path):
    result = invoke("run", *TINY, "--nproc-per-node", "2", "--output", tmp_path / "r.json")
    assert result.exit_code == 2
    assert "strategy 'single' runs on at most 1 process(es)" in result.output
    assert not (tmp_path / "r.json").exists()


def test_fp16_on_cpu_is_refused_clearly(invoke):
    result = invoke("run", *TINY, "--precision", "fp16", "--device", "cpu")
    assert result.exit_code == 2
    assert "'fp16' is not supported by strategy 'single' on cpu; allowed: fp32, bf16" in (
        result.output
    )


def test_print_config_shows_the_merged_config(invoke, tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('preset = "tiny"\n[training]\nsteps = 4\nrepeat = 2\n')
    result = invoke("run", "--config", toml, "--steps", "6", "--print-config")
    assert result.exit_code == 0
    assert "steps = 6" in result.output and "repeat = 2" in result.output
    assert "d_model = 32" in result.output


@pytest.mark.slow
def test_run_writes_result_with_trials_and_summary(invoke, tmp_path):
    out = tmp_path / "result.json"
    tiny = ["--preset", "tiny", "--steps", "4", "--warmup-steps", "1"]  # the peak calibrated
    result = invoke("run", "--strategy", "single", *tiny, "--repeat", "2", "--output", out)
    assert result.exit_code == 0, result.output
    assert "tokens/s (global)" in result.output and f"result written to {out}" in result.output
    doc = read_json(out)
    assert (doc["kind"], doc["status"], doc["schema_version"]) == ("train", "ok", 1)
    assert doc["config"]["training"]["steps"] == 4
    assert len(doc["trials"]) == 2
    for trial in doc["trials"]:
        assert [s["step"] for s in trial["steps"]] == [1, 2, 3]  # warmup step 0 excluded
        assert trial["tokens_per_step"] == 2 * 32
    # trials are independent rebuilds of the same workload: same losses
    assert [s["loss"] for s in doc["trials"][0]["steps"]] == [
        s["loss"] for s in doc["trials"][1]["steps"]
    ]
    assert doc["summary"]["tokens_per_s"]["n"] == 2
    assert doc["summary"]["single_run"] is False
    assert doc["environment"]["peak_flops_source"] == "measured-cpu-matmul-fp32"
    measured = doc["environment"]["peak_flops_measurement"]
    assert measured["flops"] == doc["environment"]["peak_flops_per_device"]
    assert measured["threads"] == doc["environment"]["torch_threads"]
    assert measured["gemms_mkn"][0] == [1024, 1024, 1024]  # tiny is below the floor
    assert (measured["dtype"], measured["rounds"] >= 1) == ("fp32", True)
    assert 0 < doc["summary"]["mfu"]["mean"] < 1
    assert doc["model"]["parameters"] == 34688


@pytest.mark.slow
def test_peak_tflops_flag_sets_the_mfu_peak(invoke, tmp_path):
    out = tmp_path / "r.json"
    assert invoke("run", *TINY, "--peak-tflops", "1.5", "--output", out).exit_code == 0
    doc = read_json(out)
    assert doc["environment"]["peak_flops_per_device"] == 1.5e12
    trial = doc["trials"][0]
    expected = trial["tokens_per_s_per_device"] * doc["model"]["flops_per_token"] / 1.5e12
    assert trial["mfu"] == expected
    assert doc["environment"]["peak_flops_measurement"] is None


def test_an_mfu_above_100_percent_is_never_printed_without_a_warning(invoke, tmp_path):
    out = tmp_path / "r.json"
    result = invoke("run", *TINY, "--peak-tflops", "1e-9", "--output", out)
    assert result.exit_code == 0, result.output
    assert read_json(out)["summary"]["mfu"]["max"] > 1
    row = next(line for line in result.output.splitlines() if "MFU %" in line)
    assert "above peak" in row
    assert "MFU above 100 %: the peak" in " ".join(result.output.split())
