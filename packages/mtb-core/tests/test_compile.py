"""--compile: per-block torch.compile, its time reported apart, losses as eager."""

import math
import time

import pytest
from conftest import read_json

from mtb.compiling import CompileTimer, check_measured, compile_blocks
from mtb.errors import RunFailed, UsageError
from mtb.metrics import StepMetrics
from mtb.strategy import Strategy

TINY_COMPILE = ["--preset", "tiny", "--steps", "3", "--warmup-steps", "1", "--repeat", "1"]


def step(number: int, warmup: bool, compile_ms: float) -> StepMetrics:
    return StepMetrics(number, warmup, 0.0, 0.0, 0.0, 1.0, 1.0, 8, compile_ms=compile_ms)


def test_timer_adds_up_torch_compilation_events_and_ignores_them_when_closed():
    from torch._dynamo.callback import CallbackTrigger, callback_handler

    def compilation(seconds: float) -> None:
        with callback_handler.install_callbacks(CallbackTrigger.DYNAMO, "0/0"):
            time.sleep(seconds)

    with CompileTimer(True) as timer:
        compilation(0.05)
        assert timer.take() >= 50.0
        assert timer.take() == 0.0
    compilation(0.01)
    assert timer.take() == 0.0
    with CompileTimer(False) as eager:
        compilation(0.01)
    assert eager.take() == 0.0


def test_timer_counts_nested_compilation_events_once():
    """Older torch releases call the callbacks for nested compilations as well."""
    timer = CompileTimer(True)
    timer._start()
    time.sleep(0.02)
    timer._start()
    timer._end()
    assert timer.take() == 0.0  # the outer compilation is still running
    time.sleep(0.02)
    timer._end()
    assert timer.take() >= 40.0


def test_a_measured_step_that_compiled_stops_the_run_with_one_line():
    check_measured([step(0, True, 900.0), step(1, False, 0.0)])
    with pytest.raises(RunFailed, match=r"measured step 2: raise training.warmup_steps"):
        check_measured([step(0, True, 900.0), step(1, False, 0.0), step(2, False, 3.0)])


def test_compiles_each_block_in_place_keeping_names_and_types():
    from mtb.config import ModelConfig
    from mtb.model import GPT, Block
    from mtb.presets import PRESETS

    model = GPT(ModelConfig(**PRESETS["tiny"]))
    keys = list(model.state_dict())
    compile_blocks(model)
    assert all(type(block) is Block and block._compiled_call_impl for block in model.blocks)
    assert list(model.state_dict()) == keys


def test_compile_needs_a_warmup_step(invoke, tmp_path):
    result = invoke("run", *TINY_COMPILE[:4], "--warmup-steps", "0", "--compile")
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "Error: training.warmup_steps: must be >= 1 with training.compile "
        "(compiling happens in the warmup steps)"
    )


def test_a_strategy_that_cannot_compile_refuses_it():
    from mtb.config import resolve

    class Plain(Strategy):
        name = "plain"
        compiles = False

    config = resolve(flags={"preset": "tiny", "training": {"compile": True}})
    with pytest.raises(UsageError, match=r"training.compile: strategy 'plain' does not support it"):
        Plain().check(config, "cpu")


@pytest.mark.slow(reason="torch.compile of the model takes minutes on a small CPU")
@pytest.mark.timeout(1200)
def test_compiled_single_run_matches_eager_and_reports_compile_time(invoke, tmp_path):
    """The suite's one compiling test: compiling is slow on a small CPU machine."""
    for name, extra in (("eager", []), ("compiled", ["--compile"])):
        result = invoke("run", *TINY_COMPILE, *extra, "--output", tmp_path / f"{name}.json")
        assert result.exit_code == 0, result.output
    eager, compiled = (read_json(tmp_path / f"{n}.json") for n in ("eager", "compiled"))
    assert compiled["config"]["training"]["compile"] is True
    assert compiled["environment"]["compile"]["scope"] == "each transformer block"
    assert eager["environment"]["compile"] is None
    assert compiled["trials"][0]["compile_s"] > 0 == eager["trials"][0]["compile_s"]
    assert compiled["summary"]["compile_s"]["mean"] == compiled["trials"][0]["compile_s"]
    steps = zip(eager["trials"][0]["steps"], compiled["trials"][0]["steps"], strict=True)
    for a, b in steps:
        assert math.isclose(a["loss"], b["loss"], rel_tol=1e-5)
