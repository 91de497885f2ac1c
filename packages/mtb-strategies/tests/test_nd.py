"""Strategy nd on 2 gloo ranks: tensor and sequence parallel equal `single` on the same batch.

With SGD (see conftest.SGD) and clipping.
"""

import pytest
from conftest import SGD, assert_same_training, grad_norms, launch, losses

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    """tp 2: both ranks take the whole batch of 4, clipped like the clipped reference."""
    tmp = tmp_path_factory.mktemp("tp2")
    done, result, state = launch("nd", tmp, "--tp", 2, "--micro-batch-size", 4, *SGD)
    assert done.returncode == 0, done.stderr
    return result, state


@pytest.fixture(scope="module")
def tp2_sp(tmp_path_factory):
    """tp 2 + sequence parallel, 2 micro-batches of 2 and activation checkpointing."""
    tmp = tmp_path_factory.mktemp("tp2-sp")
    args = ["--tp", 2, "--sequence-parallel", "--micro-batch-size", 2, "--grad-accum-steps", 2]
    done, result, state = launch("nd", tmp, *args, "--activation-checkpointing", *SGD)
    assert done.returncode == 0, done.stderr
    return result, state


def clipped(result) -> list[bool]:
    return [s["clipped"] for s in result["trials"][0]["steps"]]


@pytest.mark.parametrize("layout", ["tp2", "tp2_sp"])
def test_tensor_parallel_equals_single_with_clipping(layout, request, reference_sgd):
    result, state = request.getfixturevalue(layout)
    assert_same_training(result, state, reference_sgd)
    assert grad_norms(result) == pytest.approx(grad_norms(reference_sgd[0]), rel=1e-5)
    assert clipped(result) == clipped(reference_sgd[0])
    assert set(clipped(result)) == {True, False}  # some steps clip, others do not


def test_layout_and_tokens_once_per_data_parallel_rank(tp2, tp2_sp):
    for result in (tp2[0], tp2_sp[0]):
        assert result["environment"]["layout"]["label"] == "tp2"
        trial = result["trials"][0]
        assert trial["tokens_per_step"] == 4 * 32  # both ranks trained on the same 4 sequences
        step_s = sum(s["step_ms"] for s in trial["steps"]) / 1000
        assert trial["tokens_per_s"] == pytest.approx(4 * 32 * len(losses(result)) / step_s)


def test_tensor_parallel_collectives_are_counted(tp2, tp2_sp):
    # 2 blocks, each 2 sub-layers: an all-reduce per sub-layer in forward and in backward;
    # the embedding's all-reduce, the head's gathered logits, its input gradient's all-reduce
    counts = tp2[0]["strategy_details"]["tp_collectives_per_step"]
    assert counts == {"all_gather_into_tensor": 1, "all_reduce": 8 + 2}
    # per micro-batch: forward all-gathers 2 per block + 1 at the end + the logits,
    # reduce-scatters 2 per block; backward the same all-gathers but the logits', and an
    # all-reduce per sub-layer (torch's choice); the embedding and head all-reduces;
    # activation checkpointing recomputes each block up to its last saved tensor: 2 more
    # all-gathers and 1 reduce-scatter per block. Per step: the sequence-parallel norms'
    # 8 partial gradients summed
    counts = tp2_sp[0]["strategy_details"]["tp_collectives_per_step"]
    micro = {"all_gather_into_tensor": 11 + 4, "reduce_scatter_tensor": 4 + 2, "all_reduce": 6}
    assert counts == {kind: 2 * n + (8 if kind == "all_reduce" else 0) for kind, n in micro.items()}


@pytest.mark.parametrize("preset", ["parallelism", "parallelism-8gpu"])
def test_parallelism_presets_plan_every_layout_without_a_refusal(preset):
    from click.testing import CliRunner

    from mtb.cli import make_cli
    from mtb.plugins import build_plugin_manager

    cli = make_cli(build_plugin_manager())
    result = CliRunner().invoke(cli, ["matrix", "show", "--preset", preset])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "strategy=nd" in text and "will fail" not in text


def test_zero3_with_tp_is_refused_before_any_process_starts(invoke_strategies):
    pytest.importorskip("deepspeed")
    result = invoke_strategies("--strategy", "zero3", "--tp", "2", "--nproc-per-node", "2")
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        "Error: parallel.tp: strategy 'zero3' cannot take tp 2 (it takes: data parallelism only)"
    ]
