"""What mtb-strategies registers, and how the ZeRO strategies behave without DeepSpeed."""

import importlib.util
import json

import pytest
from click.testing import CliRunner

from mtb.cli import make_cli
from mtb.plugins import build_plugin_manager

HINT = "needs deepspeed; install with: pip install mtb-strategies[deepspeed]"


@pytest.fixture
def without_deepspeed(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        "mtb.strategy.find_spec", lambda name: None if name == "deepspeed" else real(name)
    )


def test_registers_every_strategy_with_its_plugin():
    registry = build_plugin_manager().registry("strategy")
    for name in ("ddp", "fsdp", "zero1", "zero2", "zero3"):
        assert registry.items[name].plugin == "strategies"


def test_zero_strategies_are_listed_unavailable_with_the_install_hint(without_deepspeed):
    entries = build_plugin_manager().registry("strategy")
    for name in ("zero1", "zero2", "zero3"):
        assert entries.items[name].unavailable_reason == HINT
    cli = make_cli(build_plugin_manager())
    output = CliRunner().invoke(cli, ["plugins"]).output
    assert f"unavailable: zero3: {HINT}" in output.splitlines()
    listed = json.loads(CliRunner().invoke(cli, ["plugins", "--json"]).output)
    ours = next(e for e in listed if e["name"] == "strategies")["registers"]["strategies"]
    assert {i["name"]: i["available"] for i in ours} == {
        "ddp": True,
        "fsdp": True,
        "nd": True,
        "zero1": False,
        "zero2": False,
        "zero3": False,
    }


def test_selecting_zero3_without_deepspeed_exits_2_with_the_hint(without_deepspeed):
    cli = make_cli(build_plugin_manager())
    result = CliRunner().invoke(cli, ["run", "--strategy", "zero3", "--preset", "tiny"])
    assert result.exit_code == 2
    assert result.output.strip() == f"Error: strategy 'zero3' is unavailable: {HINT}"


def test_zero_refuses_torch_sync_modes_and_sgd(invoke_strategies):
    result = invoke_strategies("--strategy", "zero2", "--gradient-sync-mode", "last")
    assert result.exit_code == 2
    assert result.output.strip() == (
        "Error: training.gradient_sync_mode: 'last' is not supported by strategy 'zero2'; "
        "allowed: auto"
    )
    result = invoke_strategies("--strategy", "zero1", "--optimizer", "sgd")
    assert (
        result.output.strip() == "Error: training.optimizer: strategy 'zero1' supports adamw only"
    )


def test_fsdp_option_flag_is_on_mtb_run():
    cli = make_cli(build_plugin_manager())
    text = " ".join(CliRunner().invoke(cli, ["run", "--help"]).output.split())
    assert "--fsdp-reshard-after-forward / --no-fsdp-reshard-after-forward" in text
    assert "--deepspeed-config TEXT" in text
