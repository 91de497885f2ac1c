"""Exact resume on 2 ranks for every strategy; resharding of fsdp; ZeRO refuses to reshard."""

import pytest
from conftest import launch

RESUME = [
    "--steps", "6", "--warmup-steps", "1", "--save-every", "3", "--dropout", "0.1",
    "--lr-schedule", "cosine", "--record-digests",
]  # fmt: skip


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("strategy", "layout"),
    [("ddp", []), ("fsdp", []), ("zero2", []), ("zero3", []), ("nd", ["--tp", "2"])],
)
def test_killed_and_resumed_run_ends_bitwise_equal_to_the_continuous_one(
    strategy, layout, tmp_path
):
    args = [*RESUME, *layout]
    done, reference, _ = launch(strategy, tmp_path, *args, "--checkpoint-dir", tmp_path / "a")
    assert done.returncode == 0, done.stderr
    split = [*args, "--checkpoint-dir", tmp_path / "b"]
    done, _, _ = launch(strategy, tmp_path, *split, "--inject-kill-at-step", 4, name="killed")
    assert done.returncode != 0
    assert "rank 1 failed: Signal 9 (SIGKILL)" in done.stderr
    done, resumed, _ = launch(strategy, tmp_path, *split, "--resume", "latest", name="resumed")
    assert done.returncode == 0, done.stderr
    assert resumed["state_digests"] == reference["state_digests"]
    record = resumed["checkpoint"]["resumed"]
    assert (record["step"], record["exact"], record["from_world_size"]) == (3, True, 2)
    backend = "deepspeed" if strategy.startswith("zero") else "dcp"
    assert resumed["checkpoint"]["backend"] == backend


@pytest.fixture(scope="module")
def fsdp_checkpoint(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp")
    args = ["--steps", "4", "--save-every", "4", "--record-digests", "--checkpoint-dir", tmp]
    done, result, _ = launch("fsdp", tmp, *args)
    assert done.returncode == 0, done.stderr
    return tmp / "step_00000004", result


@pytest.mark.timeout(300)
@pytest.mark.parametrize("nproc", [1, 4])
def test_fsdp_checkpoint_reshards_with_bit_equal_parameters(fsdp_checkpoint, nproc, tmp_path):
    step_dir, saved = fsdp_checkpoint
    args = ["--steps", "5", "--resume", step_dir, "--record-digests"]
    done, result, _ = launch("fsdp", tmp_path, *args, nproc=nproc)
    assert done.returncode == 0, done.stderr
    record = result["checkpoint"]
    assert record["loaded_digests"]["model"] == saved["state_digests"]["model"]
    assert record["resumed"]["exact"] is False
    assert f"world_size: checkpoint 2, run {nproc}" in record["resumed"]["allowed_changes"]


@pytest.mark.timeout(300)
def test_zero_checkpoint_refuses_another_world_size(tmp_path):
    args = ["--steps", "2", "--save-every", "2", "--checkpoint-dir", tmp_path / "z"]
    done, _, _ = launch("zero2", tmp_path, *args)
    assert done.returncode == 0, done.stderr
    resume = ["--steps", "3", "--resume", tmp_path / "z" / "step_00000002"]
    done, _, _ = launch("zero2", tmp_path, *resume, nproc=1, name="other")
    assert done.returncode == 2
    assert "world_size: checkpoint 2, run 1 (DeepSpeed ZeRO partitions" in done.stderr
