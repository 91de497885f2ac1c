"""nd tensor parallelism on an MoE model: the attention of every block is split, the router
and experts stay whole on each tp rank; equal to `single`, counted once, estimated right."""

import pytest
from conftest import SGD, assert_same_training, launch

pytestmark = pytest.mark.timeout(900)

#: every block an MoE layer (4 experts, top-1, dropless): no dense MLP for tp to split
MOE = ["--preset", "tiny-moe", "--moe-every", "1", "--moe-top-k", "1", "--moe-dropless"]
MOE += ["--micro-batch-size", "4", *SGD]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nd-moe")
    found = {}
    for name, flags in (("tp2", ["--tp", "2"]), ("tp2_sp", ["--tp", "2", "--sequence-parallel"])):
        done, result, state = launch("nd", tmp, *MOE, *flags, name=name)
        assert done.returncode == 0, done.stderr
        found[name] = (result, state)
    done, *reference = launch("single", tmp, *MOE, nproc=1, name="single")
    assert done.returncode == 0, done.stderr
    found["single"] = tuple(reference)
    return found


@pytest.mark.parametrize("layout", ["tp2", "tp2_sp"])
def test_tp_on_moe_blocks_equals_single(runs, layout):
    result, state = runs[layout]
    assert_same_training(result, state, runs["single"])


@pytest.mark.parametrize("layout", ["tp2", "tp2_sp"])
def test_routing_is_counted_once_per_tp_group(runs, layout):
    """Both tp ranks route the same 4 x 32 tokens: each layer's experts saw 128 in all."""
    ours = [s["moe"]["tokens_per_expert"] for s in runs[layout][0]["trials"][0]["steps"]]
    theirs = [s["moe"]["tokens_per_expert"] for s in runs["single"][0]["trials"][0]["steps"]]
    assert ours == theirs
    assert all(sum(layer) == 128 for step in ours for layer in step)


def test_the_estimate_counts_whole_experts_on_each_tp_rank(runs):
    summary = runs["tp2"][0]["summary"]
    assert abs(summary["model_state_estimate_error"]) < 0.01
    assert summary["model_state_estimate_off"] is False
