"""ddp and fsdp on 2 gloo ranks against `single` on the same global batch.

A NaN on one ddp rank and distinct dropout masks on ddp ranks are checked by the fault
smoke (tests/test_fault_smoke.py), whose runs are ddp runs with dropout.
"""

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    accumulated,
    all_reduces_per_step,
    assert_same_training,
    bare_grad_norms,
    grad_norms,
    launch,
    losses,
    per_rank_bytes,
    syncs,
)

pytestmark = pytest.mark.timeout(900)

STRATEGIES = ["ddp", "fsdp"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_accumulating_two_ranks_match_single_on_the_same_global_batch(runs, reference, strategy):
    result, state = accumulated(runs, strategy)
    assert result["environment"]["world_size"] == 2
    assert result["trials"][0]["tokens_per_step"] == 4 * 32
    assert_same_training(result, state, reference)


def test_ddp_sync_modes_every_and_last_count_real_all_reduces(runs, reference):
    last, _ = accumulated(runs, "ddp")
    every, every_state = accumulated(runs, "ddp", "every")
    modes = last["strategy_details"]["gradient_sync_mode"]
    assert modes == {"requested": "auto", "resolved": "last"}
    assert every["strategy_details"]["gradient_sync_mode"]["resolved"] == "every"
    assert syncs(last) == {1}
    assert syncs(every) == {2}
    assert_same_training(every, every_state, reference)


def test_fsdp_auto_syncs_every_micro_batch_and_last_once(runs, reference):
    auto, _ = accumulated(runs, "fsdp")
    assert auto["strategy_details"]["gradient_sync_mode"]["resolved"] == "every"
    assert syncs(auto) == {2}
    last, last_state = accumulated(runs, "fsdp", "last")
    assert syncs(last) == {1}
    assert_same_training(last, last_state, reference)


def test_fsdp_holds_at_most_055_of_ddp_model_state(runs):
    ddp = per_rank_bytes(accumulated(runs, "ddp")[0])
    fsdp = per_rank_bytes(accumulated(runs, "fsdp")[0])
    assert all(f / d <= 0.55 for d, f in zip(ddp, fsdp, strict=True))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_estimate_is_close_to_measured(runs, strategy):
    summary = accumulated(runs, strategy)[0]["summary"]
    assert abs(summary["model_state_estimate_error"]) < 0.02


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_bf16_trains(tmp_path, strategy):
    args = ["--precision", "bf16", "--steps", "12", "--lr", "3e-3", "--micro-batch-size", "4"]
    done, result, _ = launch(strategy, tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert result["config"]["training"]["precision"] == "bf16"
    values = losses(result)
    assert sum(values[-3:]) / 3 < values[0] - 0.2


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_norm_and_finite_check_share_one_all_reduce_per_step(runs, strategy):
    """Over 2 micro-batches too: the loss, the finite flag and fsdp's shard norms go once."""
    assert all_reduces_per_step(runs, strategy) == [1] * 5


def test_nan_on_an_fsdp_rank_stops_both_ranks_with_the_same_message(tmp_path):
    args = ["--inject-nan-at-step", "3", "--inject-nan-rank", "1"]
    done, result, _ = launch("fsdp", tmp_path, *args)
    assert done.returncode == 1
    message = "non-finite loss on rank(s) 1 at step 3; no optimizer step was taken"
    assert {f"mtb: rank 0: {message}", f"mtb: rank 1: {message}"} <= set(done.stderr.splitlines())
    assert result["status"] == "failed"


def test_fp16_on_cpu_and_unknown_sync_modes_are_refused_before_launch(invoke_strategies):
    result = invoke_strategies("--strategy", "fsdp", "--precision", "fp16", "--device", "cpu")
    assert result.exit_code == 2
    assert "'fp16' is not supported by strategy 'fsdp' on cpu" in result.output


@pytest.mark.parametrize("strategy", ["fsdp", "zero3"])
def test_activation_checkpointing_trains_identically(runs, reference, strategy):
    if strategy == "zero3":
        pytest.importorskip("deepspeed")
    result, state = accumulated(runs, strategy, "auto", "--activation-checkpointing")
    assert result["config"]["training"]["activation_checkpointing"] is True
    assert_same_training(result, state, reference)


@pytest.mark.parametrize("strategy", ["single", *STRATEGIES])
def test_grad_norm_is_the_full_model_norm_on_every_step_without_clipping(runs, reference, strategy):
    result = reference[0] if strategy == "single" else accumulated(runs, strategy)[0]
    assert result["config"]["training"]["max_grad_norm"] is None
    assert grad_norms(result) == pytest.approx(bare_grad_norms(), rel=1e-4)


CLIP = ["--max-grad-norm", "0.5"]


@pytest.fixture(scope="module")
def clipped_single(tmp_path_factory):
    """`single` with clipping on the whole global batch, the clipped runs' baseline."""
    tmp = tmp_path_factory.mktemp("single-clipped")
    done, *single = launch("single", tmp, "--micro-batch-size", "4", *CLIP, nproc=1)
    assert done.returncode == 0, done.stderr
    return single


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_clipping_matches_single_on_the_same_global_batch(runs, clipped_single, strategy):
    single = clipped_single
    result, state = accumulated(runs, strategy, "auto", *CLIP)
    steps = result["trials"][0]["steps"]
    assert all(s["clipped"] for s in steps)
    assert grad_norms(result) == pytest.approx(grad_norms(single[0]), rel=1e-4)
    assert_same_training(result, state, single)


@pytest.mark.slow(reason="two launches, single and 2-rank ddp, on one token file")
def test_two_ranks_match_single_on_a_token_file(tmp_path):
    """Real data keeps the equality: a Megatron indexed dataset of Python's own source
    bytes (the tiny vocabulary is 256), written by numpy in Megatron-LM's layout."""
    tokens = np.frombuffer(Path(json.__file__).read_bytes(), dtype=np.uint8).astype(np.uint16)
    prefix = tmp_path / "text_document"
    tokens.tofile(f"{prefix}.bin")
    header = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, 1, 2)
    index = np.array([len(tokens)], np.int32).tobytes() + np.array([0, 0, 1], np.int64).tobytes()
    Path(f"{prefix}.idx").write_bytes(header + index)
    data = ["--data", prefix]
    single = launch("single", tmp_path, *data, "--micro-batch-size", 4, nproc=1, name="single")
    accumulating = ["--micro-batch-size", 1, "--grad-accum-steps", 2]
    ddp = launch("ddp", tmp_path, *data, *accumulating, name="ddp")
    for done, result, _ in (single, ddp):
        assert done.returncode == 0, done.stderr
        assert result["components"]["data_source"]["name"] == "megatron"
    assert_same_training(ddp[1], ddp[2], single[1:])
