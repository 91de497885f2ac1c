"""Expert parallelism (--ep 2) in ddp, fsdp and nd runs against single on the same global batch.

Two MoE workloads, each launched once at ep 2 and once in `single` with the
whole global batch: top-2 with drops (ddp, saving checkpoints that the
resume tests load) and top-1 dropless (fsdp on the dense parameters, and nd,
the N-D mesh's FSDP with the experts on its data-parallel ranks). That one
`single` run of top-1 dropless is also the reference of its two 4-rank layouts.
"""

import pytest
from conftest import assert_same_training, launch

pytestmark = pytest.mark.timeout(900)

MOE = ["--preset", "tiny-moe", "--steps", "4", "--moe-every", "1"]
WORKLOADS = {
    "top2-drops": [*MOE, "--moe-top-k", "2", "--moe-capacity-factor", "1.0"],
    "top1-dropless": [*MOE, "--moe-top-k", "1", "--moe-dropless"],
}
STRATEGY = {"top2-drops": "ddp", "top1-dropless": "fsdp"}
SAVE = ["--save-every", "2", "--record-digests"]


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """`single` on the whole global batch (4 sequences) of a workload, launched on first use:
    the reference of every run of that workload in this module, whatever its layout."""
    cache = {}

    def get(workload):
        if workload not in cache:
            tmp = tmp_path_factory.mktemp(f"{workload}-single")
            args = [*WORKLOADS[workload], "--micro-batch-size", "4"]
            done, *reference = launch("single", tmp, *args, nproc=1)
            assert done.returncode == 0, done.stderr
            cache[workload] = tuple(reference)
        return cache[workload]

    return get


@pytest.fixture(scope="module")
def runs(tmp_path_factory, single):
    """(ep 2 run, single reference) per workload; the ddp run keeps its checkpoints."""
    found = {}
    for name, args in WORKLOADS.items():
        tmp = tmp_path_factory.mktemp(name)
        saving = [*SAVE, "--checkpoint-dir", tmp / "ckpt"] if STRATEGY[name] == "ddp" else []
        done, result, state = launch(STRATEGY[name], tmp, *args, "--ep", "2", *saving)
        assert done.returncode == 0, done.stderr
        found[name] = {"run": (result, state), "reference": single(name), "dir": tmp}
    tmp = tmp_path_factory.mktemp("nd")
    done, result, state = launch("nd", tmp, *WORKLOADS["top1-dropless"], "--ep", "2")
    assert done.returncode == 0, done.stderr
    found["nd"] = {"run": (result, state), "reference": single("top1-dropless")}
    return found


@pytest.mark.parametrize("workload", [*WORKLOADS, "nd"])
def test_ep2_trains_like_single_on_the_same_global_batch(runs, workload):
    found = runs[workload]
    result, state = found["run"]
    assert result["environment"]["layout"]["ep"] == 2
    assert_same_training(result, state, found["reference"])


@pytest.mark.slow
@pytest.mark.four_ranks
def test_ep2_of_dp4_reduces_expert_gradients_over_replicas(single, tmp_path):
    """4 ranks, experts split over pairs: each expert on 2 ranks, its gradient summed over them."""
    args = [*WORKLOADS["top1-dropless"], "--ep", "2"]
    done, result, state = launch("ddp", tmp_path, *args, "--micro-batch-size", "1", nproc=4)
    assert done.returncode == 0, done.stderr
    assert result["environment"]["layout"]["ep"] == 2
    assert_same_training(result, state, single("top1-dropless"))


@pytest.mark.slow
@pytest.mark.four_ranks
def test_nd_hsdp_with_ep2_trains_like_single(single, tmp_path):
    """nd dp_replicate 2 x dp_shard 2 with ep 2: HSDP's 2-D mesh on the dense parameters,
    each expert on 2 of the 4 ranks; the gradient norm summed across both."""
    args = [*WORKLOADS["top1-dropless"], "--micro-batch-size", "1"]
    layout = ["--dp-replicate", "2", "--dp-shard", "2", "--ep", "2"]
    done, result, state = launch("nd", tmp_path, *args, *layout, nproc=4)
    assert done.returncode == 0, done.stderr
    parallel = result["config"]["parallel"]
    assert (result["environment"]["layout"]["ep"], parallel["dp_replicate"]) == (2, 2)
    assert_same_training(result, state, single("top1-dropless"))


def test_nd_refuses_ep_beside_tp_cp_or_pp_before_launch(invoke_strategies):
    for beside in ("--tp", "--cp", "--pp"):
        args = ["--strategy", "nd", *MOE[2:], "--preset", "tiny-moe", "--ep", "2", beside, "2"]
        done = invoke_strategies("--device", "cpu", "--nproc-per-node", "4", *args)
        assert done.exit_code == 2, done.output
        errors = [line for line in done.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and "Traceback" not in done.output, done.output
        assert "parallel.ep: 2 runs over data-parallel ranks only" in errors[0]
        assert f"with {beside[2:]} 2 (use tp = cp = pp = 1 with ep)" in errors[0]


def test_steps_record_routing_and_all_to_all_figures(runs):
    drops = [s["moe"] for s in runs["top2-drops"]["run"][0]["trials"][0]["steps"]]
    assert all(m["dropped_fraction"] > 0 for m in drops)
    for m in drops:  # 2 MoE layers, 4 sequences of 32 tokens, top-2: 256 assignments each
        kept = [sum(layer) for layer in m["tokens_per_expert"]]
        assert m["dropped_fraction"] == pytest.approx(1 - sum(kept) / 512)
        assert m["imbalance"] >= 1 and m["tokens_per_expert_min"] <= m["tokens_per_expert_max"]
    dropless = runs["top1-dropless"]["run"][0]
    for m in (s["moe"] for s in dropless["trials"][0]["steps"]):
        assert m["dropped_fraction"] == 0
        assert [sum(layer) for layer in m["tokens_per_expert"]] == [128, 128]
        # each rank sends its 64 rows and the rows it got back, forward and backward:
        # 4 x 128 rows of 32 fp32 features per layer, over both ranks
        assert m["all_to_all_bytes_total"] == 2 * 4 * 128 * 32 * 4
        assert 0 < m["dispatch_combine_share"] < 1
    assert dropless["summary"]["moe"]["imbalance"]["mean"] >= 1


@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_model_state_estimate_splits_the_experts(runs, workload):
    assert abs(runs[workload]["run"][0]["summary"]["model_state_estimate_error"]) < 0.02


def test_ep2_resume_is_exact(runs, tmp_path):
    found = runs["top2-drops"]
    continuous = found["run"][0]
    step_dir = found["dir"] / "ckpt" / "step_00000002"
    args = [*WORKLOADS["top2-drops"], "--ep", "2", "--record-digests", "--resume", step_dir]
    done, resumed, _ = launch("ddp", tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert resumed["checkpoint"]["resumed"]["exact"] is True
    assert resumed["state_digests"] == continuous["state_digests"]


def test_ep2_checkpoint_resumes_in_one_process_with_bit_equal_parameters(runs, tmp_path):
    found = runs["top2-drops"]
    step_dir = found["dir"] / "ckpt" / "step_00000004"
    args = [*WORKLOADS["top2-drops"], "--steps", "5", "--record-digests", "--resume", step_dir]
    done, result, _ = launch("ddp", tmp_path, *args, nproc=1)
    assert done.returncode == 0, done.stderr
    assert result["checkpoint"]["resumed"]["from_world_size"] == 2
    loaded = result["checkpoint"]["loaded_digests"]["model"]
    assert loaded == found["run"][0]["state_digests"]["model"]


def test_a_change_of_expert_count_is_refused_in_one_line(runs, tmp_path):
    step_dir = runs["top2-drops"]["dir"] / "ckpt" / "step_00000004"
    args = [*WORKLOADS["top2-drops"], "--steps", "5", "--moe-experts", "8", "--resume", step_dir]
    done, _, _ = launch("ddp", tmp_path, *args, nproc=1)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "moe_experts" in lines[0], done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--strategy", "ddp", "--ep", "2", "--moe-experts", "3"],
            "parallel.ep: 2 must divide model.moe_experts=3",
        ),
        (
            ["--strategy", "fsdp", "--ep", "2", "--preset", "tiny"],
            "parallel.ep: 2 must divide an MoE model (model.moe_experts > 0)",
        ),
        (
            ["--strategy", "zero2"],
            "model.moe_experts: strategy 'zero2' cannot train a mixture-of-experts model",
        ),
        (["--strategy", "single", "--nproc-per-node", "1", "--ep", "2"], "parallel.ep"),
    ],
)
def test_moe_layouts_a_strategy_cannot_take_are_one_line(invoke_strategies, args, message):
    result = invoke_strategies("--preset", "tiny-moe", "--nproc-per-node", "2", *args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output
