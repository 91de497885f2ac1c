"""The parallel layout: resolution, rank order, and one-line refusals before launch."""

import pytest

from mtb.config import resolve
from mtb.errors import ConfigError, UsageError
from mtb.layout import Layout
from mtb.strategy import Strategy

pytestmark = pytest.mark.timeout(60)


def config(world=4, preset="tiny", **parallel):
    flags = {"preset": preset, "launch": {"nproc_per_node": world}, "parallel": parallel}
    return resolve(flags=flags)


def test_dp_shard_takes_what_is_left():
    layout = Layout.of(config(8, tp=2, pp=2))
    assert (layout.dp_replicate, layout.dp_shard, layout.tp, layout.pp) == (1, 2, 2, 2)
    assert layout.label == "dp2·tp2·pp2"


def test_default_layout_is_data_parallel_over_the_world():
    layout = Layout.of(config(2))
    assert layout.dp == 2 and layout.label == "dp2"
    assert Layout.of(config(1)).label == "dp1"


def test_rank_order_is_tp_fastest_then_dp_then_pp():
    layout = Layout.of(config(8, tp=2, pp=2, dp_replicate=2, dp_shard=1))
    # the formula of Megatron-LM's default order (mtb megatron topology checks the same)
    for rank in range(8):
        at = layout.coordinates(rank)
        assert rank == at["tp"] + 2 * (at["dp_shard"] + 1 * (at["dp_replicate"] + 2 * at["pp"]))
    assert [layout.dp_rank(r) for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]


def test_tokens_count_once_per_data_parallel_rank():
    layout = Layout.of(config(8, tp=2, pp=2))
    assert [r for r in range(8) if layout.counts_tokens(r)] == [0, 2]
    from mtb.results import reduce_trial
    from mtb.trainer import TrialRecord

    records = [
        TrialRecord(rank, [step(rank)], {"total": 0}, {"peak_rss_bytes": 0}, {}, None, None)
        for rank in range(8)
    ]
    trial = reduce_trial(0, records, ["h"] * 8, 8, 6, None, layout)
    assert trial.tokens_per_step == 2 * 128


def step(rank):
    from mtb.metrics import StepMetrics

    timings = {"data_ms": 0.0, "forward_backward_ms": 0.0, "optimizer_ms": 0.0, "step_ms": 10.0}
    return StepMetrics(step=0, warmup=False, **timings, loss=1.0, tokens=128)


def test_layout_in_the_result_names_its_order():
    record = Layout.of(config(4, tp=2)).as_dict()
    assert record["label"] == "dp2·tp2"
    assert record["rank_order"] == "tp-cp-dp-pp"
    assert record["mesh_dims"] == ["pp", "dp_replicate", "dp_shard", "cp", "tp"]


@pytest.mark.parametrize(
    ("world", "parallel", "field", "words"),
    [
        (4, {"tp": 3}, "parallel.dp_shard", "to divide the world size 4"),
        (4, {"tp": 2, "dp_shard": 1}, "parallel", "= 2 must equal the world size 4"),
        (4, {"tp": 4, "dp_shard": 1}, "parallel.tp", "must divide model.n_heads"),
        (4, {"pp": 4, "dp_shard": 1}, "parallel.pp", "must be <= model.n_layers"),
        (2, {"sequence_parallel": True}, "parallel.sequence_parallel", "needs parallel.tp > 1"),
        (2, {"pp": 2, "pp_microbatches": 1}, "parallel.pp_microbatches", "fewer than the 2"),
        (2, {"pp": 2, "pp_microbatches": 3}, "parallel.pp_microbatches", "must divide"),
        (2, {"pp": 2, "pp_stages_per_rank": 2}, "parallel.pp_stages_per_rank", "interleaved"),
        (4, {"ep": 3}, "parallel.ep", "must divide the data-parallel size 4"),
    ],
)
def test_impossible_layouts_name_the_field_and_values(world, parallel, field, words):
    with pytest.raises(ConfigError, match=words) as error:
        Layout.of(config(world, **parallel))
    assert error.value.field == field


@pytest.mark.parametrize(
    ("flags", "field", "words"),
    [
        (
            {"data": {"micro_batch_size": 5}, "parallel": {"pp_microbatches": 5}},
            "parallel.pp_microbatches",
            "5 with interleaved-1f1b on pp 2 must be a multiple of its 2 rounds",
        ),
        (
            {"training": {"precision": "fp16"}, "data": {"micro_batch_size": 4}},
            "training.precision",
            "fp16 is not supported",
        ),
    ],
)
def test_what_torch_schedules_cannot_run_is_refused_in_one_line(flags, field, words):
    interleaved = {"pp": 2, "pp_schedule": "interleaved-1f1b", "pp_stages_per_rank": 2}
    cfg = resolve(
        flags={
            "preset": "tiny",
            "launch": {"nproc_per_node": 2},
            "model": {"n_layers": 4},
            **flags,
            "parallel": {**interleaved, **flags.get("parallel", {})},
        }
    )
    with pytest.raises(ConfigError, match=words) as error:
        Layout.of(cfg)
    assert error.value.field == field
    assert "\n" not in str(error.value)


def test_dp_shard_zero_is_refused_when_read():
    with pytest.raises(ConfigError, match=r"parallel\.dp_shard: must be >= 1, or -1"):
        config(2, dp_shard=0)


def test_gpipe_takes_fewer_micro_batches_than_stages():
    assert Layout.of(config(2, pp=2, pp_schedule="gpipe", pp_microbatches=1)).pp == 2


def test_a_data_parallel_strategy_refuses_model_dimensions():
    class DataParallel(Strategy):
        name = "dp-only"

    class TensorParallel(Strategy):
        name = "tp-too"
        parallel_dims = ("tp",)

    layout = Layout.of(config(4, tp=2))
    with pytest.raises(UsageError, match=r"parallel\.tp: strategy 'dp-only' cannot take tp 2"):
        DataParallel().check_layout(layout)
    TensorParallel().check_layout(layout)
    DataParallel().check_layout(Layout.of(config(4)))
