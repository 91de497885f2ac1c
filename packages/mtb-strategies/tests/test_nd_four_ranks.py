"""Strategy nd on 4 gloo ranks: FSDP x TP and HSDP equal `single`; FSDP x TP resumes exactly
and its checkpoints reshard.

One dp_shard 2 x tp 2 run serves the comparison, the exact resume and the checkpoint
that fsdp (4 ranks) and single (1 process) resume from.
"""

import pytest
from conftest import SGD, assert_same_training, grad_norms, launch

pytestmark = [pytest.mark.slow, pytest.mark.four_ranks, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def fsdp_tp(tmp_path_factory):
    """dp_shard 2 x tp 2, 2 sequences per data-parallel rank; saves every step (keeps 3-5)."""
    tmp = tmp_path_factory.mktemp("dp2-tp2")
    saving = ["--save-every", 1, "--checkpoint-dir", tmp / "ckpt", "--record-digests"]
    args = ["--dp-shard", 2, "--tp", 2, "--micro-batch-size", 2, *SGD, *saving]
    done, result, state = launch("nd", tmp, *args, nproc=4)
    assert done.returncode == 0, done.stderr
    return result, state, tmp / "ckpt" / "step_00000005"


def test_fsdp_by_tp_resumes_exactly_under_its_own_layout(fsdp_tp, tmp_path):
    saved, _, last = fsdp_tp
    args = ["--dp-shard", 2, "--tp", 2, "--micro-batch-size", 2, *SGD, "--record-digests"]
    resume = ["--resume", last.with_name("step_00000003")]
    done, result, _ = launch("nd", tmp_path, *args, *resume, nproc=4)
    assert done.returncode == 0, done.stderr
    assert result["checkpoint"]["resumed"]["exact"] is True
    assert result["state_digests"] == saved["state_digests"]


def test_fsdp_by_tp_equals_single(fsdp_tp, reference_sgd):
    result, state, _ = fsdp_tp
    assert result["environment"]["layout"]["label"] == "dp2·tp2"
    assert result["trials"][0]["tokens_per_step"] == 4 * 32
    assert_same_training(result, state, reference_sgd)
    assert grad_norms(result) == pytest.approx(grad_norms(reference_sgd[0]), rel=1e-5)


def test_hsdp_equals_single(tmp_path, reference_sgd):
    args = ["--dp-replicate", 2, "--dp-shard", 2, "--micro-batch-size", 1, *SGD]
    done, result, state = launch("nd", tmp_path, *args, nproc=4)
    assert done.returncode == 0, done.stderr
    assert result["environment"]["layout"]["label"] == "rep2·dp2"
    assert_same_training(result, state, reference_sgd)


@pytest.mark.parametrize(("strategy", "nproc"), [("fsdp", 4), ("single", 1)])
def test_fsdp_by_tp_checkpoint_resumes_bit_equal_as(fsdp_tp, strategy, nproc, tmp_path):
    saved, _, step_dir = fsdp_tp
    args = ["--steps", 6, "--micro-batch-size", 2, *SGD, "--resume", step_dir, "--record-digests"]
    done, result, _ = launch(strategy, tmp_path, *args, nproc=nproc)
    assert done.returncode == 0, done.stderr
    record = result["checkpoint"]
    assert record["loaded_digests"]["model"] == saved["state_digests"]["model"]
    assert record["resumed"]["exact"] is False
    label = result["environment"]["layout"]["label"]
    assert f"layout: checkpoint dp2·tp2, run {label}" in record["resumed"]["allowed_changes"]
    assert f"strategy: checkpoint 'nd', run '{strategy}'" in record["resumed"]["allowed_changes"]
