"""Context parallelism on 2 gloo ranks: ``nd --cp 2`` trains as `single` does on the same
batch, counts its ring traffic, and its checkpoints continue in `single` and back."""

import pytest
import torch
from conftest import SGD, assert_same_training, grad_norms, launch, losses

from mtb_strategies.context_parallel import chunk_positions

pytestmark = pytest.mark.timeout(900)

#: tiny: 2 layers, 2 heads of 16, 32 tokens; 4 sequences a step
LAYERS, HEADS, HEAD_DIM, SEQ, BATCH = 2, 2, 16, 32, 4


@pytest.fixture(scope="module")
def cp2(tmp_path_factory):
    """cp 2: both ranks take the 4 sequences, half of each; saves every step."""
    tmp = tmp_path_factory.mktemp("cp2")
    saving = ["--save-every", 1, "--checkpoint-dir", tmp / "ckpt", "--record-digests"]
    done, result, state = launch("nd", tmp, "--cp", 2, "--micro-batch-size", BATCH, *SGD, *saving)
    assert done.returncode == 0, done.stderr
    return result, state, tmp / "ckpt"


def test_chunks_pair_the_ends_of_the_sequence():
    assert chunk_positions(16, 2, 0).tolist() == [0, 1, 2, 3, 12, 13, 14, 15]
    assert chunk_positions(16, 2, 1).tolist() == [4, 5, 6, 7, 8, 9, 10, 11]
    every = torch.cat([chunk_positions(24, 3, rank) for rank in range(3)])
    assert sorted(every.tolist()) == list(range(24))


@pytest.mark.slow
def test_cp2_equals_single(cp2, reference_sgd):
    result, state, _ = cp2
    assert result["environment"]["layout"]["label"] == "cp2"
    assert result["trials"][0]["tokens_per_step"] == BATCH * SEQ  # counted once, not per cp rank
    assert_same_training(result, state, reference_sgd)
    assert grad_norms(result) == pytest.approx(grad_norms(reference_sgd[0]), rel=1e-5)


@pytest.mark.slow
def test_ring_traffic_is_what_the_ring_sends(cp2):
    """Per layer and step: forward passes K/V one hop; backward passes K/V with their fp32
    gradients one hop, then the gradients home: 4 x (K and V) of a rank's half sequence."""
    kv_bytes = 2 * BATCH * HEADS * (SEQ // 2) * HEAD_DIM * 4
    for rank in cp2[0]["trials"][0]["per_rank"]:
        ring = rank["engine_metrics"]["context_parallel"]
        assert ring["attention"] == "ring" and ring["cp"] == 2
        assert ring["send_recv_bytes_per_step"] == LAYERS * 4 * kv_bytes
        assert ring["send_recv_messages_per_step"] == LAYERS * (1 + 2 + 1)
        assert ring["send_recv_ms_per_step"] > 0


@pytest.mark.slow
def test_cp2_halves_the_activations_of_a_rank(cp2, reference_sgd):
    """Each cp rank saves the activations of half of every sequence (the weights aside)."""
    single = reference_sgd[0]["summary"]["activation_saved_bytes_per_rank"]["mean"]
    for rank in cp2[0]["trials"][0]["per_rank"]:
        assert 0.4 * single < rank["memory"]["activation_saved_bytes"] < 0.6 * single


@pytest.mark.slow
def test_cp2_checkpoint_continues_in_single_and_back(cp2, tmp_path):
    """cp 2 step 3 resumed by `single`, and single's step 3 resumed by cp 2: steps 4-5 as the
    uninterrupted cp 2 run trained them."""
    saved, _, ckpt = cp2
    common = ["--micro-batch-size", BATCH, *SGD]
    saving = ["--save-every", 1, "--checkpoint-dir", tmp_path / "single-ckpt"]
    resume = ["--resume", ckpt / "step_00000003"]
    done, as_single, _ = launch("single", tmp_path, *common, *resume, *saving, nproc=1)
    assert done.returncode == 0, done.stderr
    assert losses(as_single) == pytest.approx(losses(saved)[3:], rel=1e-5)
    resume = ["--resume", tmp_path / "single-ckpt" / "step_00000004"]
    done, back, _ = launch("nd", tmp_path, "--cp", 2, *common, *resume, name="back")
    assert done.returncode == 0, done.stderr
    assert losses(back) == pytest.approx(losses(saved)[4:], rel=1e-5)
    changes = back["checkpoint"]["resumed"]["allowed_changes"]
    assert "layout: checkpoint dp1, run cp2" in changes


def test_cp_is_refused_before_launch(invoke_strategies):
    cases = [
        (["--strategy", "ddp", "--cp", "2", "--nproc-per-node", "2"], "cannot take cp 2"),
        (["--strategy", "nd", "--cp", "3", "--nproc-per-node", "3"], "parallel.cp: 3: 2 x cp"),
        (
            ["--strategy", "nd", "--cp", "2", "--nproc-per-node", "2", "--dropout", "0.1"],
            "parallel.cp: 2: ring attention applies no dropout",
        ),
        (
            ["--strategy", "nd", "--cp", "2", "--tp", "2", "--nproc-per-node", "2"],
            "x cp 2 x tp 2 x pp 1 = 4 to divide the world size 2",
        ),
        (
            ["--strategy", "nd", "--cp", "2", "--dp-shard", "2", "--nproc-per-node", "2"],
            "x dp_shard 2 x cp 2 x tp 1 x pp 1 = 4 must equal the world size 2",
        ),
    ]
    for args, words in cases:
        done = invoke_strategies("--device", "cpu", *args)
        assert done.exit_code == 2, (args, done.output)
        errors = [line for line in done.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and words in errors[0], done.output
        assert "Traceback" not in done.output
