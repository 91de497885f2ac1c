"""ddp and fsdp on 2 gloo ranks against `single` on the same global batch."""

import pytest
from conftest import assert_same_training, launch, losses

pytestmark = pytest.mark.timeout(900)

STRATEGIES = ["ddp", "fsdp"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Results by (strategy, variant), launched once and shared by the tests below."""
    cache = {}

    def get(strategy, variant, *args):
        key = (strategy, variant)
        if key not in cache:
            tmp = tmp_path_factory.mktemp(f"{strategy}-{variant}")
            done, result, state = launch(strategy, tmp, *args)
            assert done.returncode == 0, done.stderr
            cache[key] = (result, state)
        return cache[key]

    return get


def whole_batch(runs, strategy):
    return runs(strategy, "b2", "--micro-batch-size", "2")


def accumulated(runs, strategy, mode="auto"):
    return runs(
        strategy,
        f"k2-{mode}",
        "--micro-batch-size",
        "1",
        "--grad-accum-steps",
        "2",
        "--gradient-sync-mode",
        mode,
    )


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_matches_single_on_the_same_global_batch(runs, reference, strategy):
    result, state = whole_batch(runs, strategy)
    assert result["environment"]["world_size"] == 2
    assert_same_training(result, state, reference)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_two_micro_batches_of_b_equal_one_step_of_2b(runs, reference, strategy):
    result, state = accumulated(runs, strategy)
    assert_same_training(result, state, reference)


def test_ddp_sync_modes_every_and_last_count_real_all_reduces(runs, reference):
    last, last_state = accumulated(runs, "ddp")
    every, every_state = accumulated(runs, "ddp", "every")
    assert last["strategy_details"]["gradient_sync_mode"] == {
        "requested": "auto",
        "resolved": "last",
    }
    assert every["strategy_details"]["gradient_sync_mode"]["resolved"] == "every"
    assert {s["gradient_syncs"] for s in last["trials"][0]["steps"]} == {1}
    assert {s["gradient_syncs"] for s in every["trials"][0]["steps"]} == {2}
    assert_same_training(every, every_state, (last, last_state))


def test_fsdp_auto_syncs_every_micro_batch_and_last_once(runs):
    auto, _ = accumulated(runs, "fsdp")
    assert auto["strategy_details"]["gradient_sync_mode"]["resolved"] == "every"
    assert {s["gradient_syncs"] for s in auto["trials"][0]["steps"]} == {2}
    last, _ = accumulated(runs, "fsdp", "last")
    assert {s["gradient_syncs"] for s in last["trials"][0]["steps"]} == {1}


def test_fsdp_holds_about_half_of_ddp_model_state(runs):
    ddp = whole_batch(runs, "ddp")[0]["trials"][0]["per_rank"]
    fsdp = whole_batch(runs, "fsdp")[0]["trials"][0]["per_rank"]
    for ddp_rank, fsdp_rank in zip(ddp, fsdp, strict=True):
        ratio = fsdp_rank["model_state_bytes"]["total"] / ddp_rank["model_state_bytes"]["total"]
        assert ratio <= 0.55


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_estimate_is_close_to_measured(runs, strategy):
    summary = whole_batch(runs, strategy)[0]["summary"]
    assert abs(summary["model_state_estimate_error"]) < 0.02


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_bf16_trains(tmp_path, strategy):
    done, result, _ = launch(
        strategy,
        tmp_path,
        "--precision",
        "bf16",
        "--steps",
        "12",
        "--lr",
        "3e-3",
        "--micro-batch-size",
        "4",
    )
    assert done.returncode == 0, done.stderr
    assert result["config"]["training"]["precision"] == "bf16"
    values = losses(result)
    assert sum(values[-3:]) / 3 < values[0] - 0.2


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_nan_on_rank_1_stops_both_ranks_with_the_same_message(tmp_path, strategy):
    done, result, _ = launch(
        strategy, tmp_path, "--inject-nan-at-step", "3", "--inject-nan-rank", "1"
    )
    assert done.returncode == 1
    message = "non-finite loss on rank(s) 1 at step 3; no optimizer step was taken"
    assert {f"mtb: rank 0: {message}", f"mtb: rank 1: {message}"} <= set(done.stderr.splitlines())
    assert result["status"] == "failed"


def test_unsupported_sync_mode_and_precision_are_refused(tmp_path):
    done, _, _ = launch("fsdp", tmp_path, "--precision", "fp16")
    assert done.returncode == 2
    assert "'fp16' is not supported by strategy 'fsdp' on cpu" in done.stderr
