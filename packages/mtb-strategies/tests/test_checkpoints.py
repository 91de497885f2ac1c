"""Exact resume on 2 ranks for every strategy; resharding of fsdp; ZeRO refuses to reshard.

ddp's kill and exact resume is the fault smoke's (tests/test_fault_smoke.py: rank-crash and
kill-during-save, both ddp runs compared with an uninterrupted one).
"""

import pytest
from conftest import launch

# dropout and a schedule, so RNG and scheduler state must resume exactly too
CONFIG = [
    "--warmup-steps", "1", "--dropout", "0.1", "--lr-schedule", "cosine", "--record-digests",
]  # fmt: skip
RESUME = ["--steps", "6", "--save-every", "3", *CONFIG]
LAST = "step_00000006"


@pytest.fixture(scope="module")
def continuous(tmp_path_factory):
    """An uninterrupted 6-step run per strategy (and layout) saving steps 3 and 6: its folder
    and result."""
    cache = {}

    def get(strategy, *layout):
        key = (strategy, *layout)
        if key not in cache:
            tmp = tmp_path_factory.mktemp(f"{strategy}-continuous")
            args = [*RESUME, *layout, "--checkpoint-dir", tmp / "a"]
            done, result, _ = launch(strategy, tmp, *args)
            assert done.returncode == 0, done.stderr
            cache[key] = tmp / "a", result
        return cache[key]

    return get


@pytest.mark.slow(reason="three 2-rank launches: continuous, killed, resumed (ZeRO: DeepSpeed)")
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("strategy", "layout"), [("fsdp", ()), ("zero2", ()), ("zero3", ()), ("nd", ("--tp", "2"))]
)
def test_killed_and_resumed_run_ends_bitwise_equal_to_the_continuous_one(
    continuous, strategy, layout, tmp_path
):
    _, reference = continuous(strategy, *layout)
    split = [*RESUME, *layout, "--checkpoint-dir", tmp_path / "b"]
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


@pytest.mark.timeout(300)
@pytest.mark.parametrize("nproc", [1, 4])
def test_fsdp_checkpoint_reshards_with_bit_equal_parameters(continuous, nproc, tmp_path):
    directory, saved = continuous("fsdp")
    args = [*CONFIG, "--steps", "7", "--resume", directory / LAST]
    done, result, _ = launch("fsdp", tmp_path, *args, nproc=nproc)
    assert done.returncode == 0, done.stderr
    record = result["checkpoint"]
    assert record["loaded_digests"]["model"] == saved["state_digests"]["model"]
    assert record["resumed"]["exact"] is False
    assert f"world_size: checkpoint 2, run {nproc}" in record["resumed"]["allowed_changes"]


@pytest.mark.timeout(300)
def test_zero_checkpoint_refuses_another_world_size(continuous, tmp_path):
    directory, _ = continuous("zero2")
    resume = [*CONFIG, "--steps", "7", "--resume", directory / LAST]
    done, _, _ = launch("zero2", tmp_path, *resume, nproc=1, name="other")
    assert done.returncode == 2
    assert "world_size: checkpoint 2, run 1 (DeepSpeed ZeRO partitions" in done.stderr
