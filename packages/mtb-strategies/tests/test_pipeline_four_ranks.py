"""Pipeline parallel composed with data and tensor parallelism (strategy nd, 4 gloo ranks)."""

import pytest
from conftest import PIPELINE_MODEL, assert_same_training, grad_norms, launch, losses

pytestmark = [pytest.mark.slow, pytest.mark.four_ranks, pytest.mark.timeout(1200)]


@pytest.mark.parametrize(
    ("label", "args", "syncs"),
    [
        # two data-parallel ranks of 2 sequences each: the reference's 4; FSDP syncs the
        # stage's gradients in its last micro-batch's backward, once a step
        ("dp2·pp2", ["--dp-shard", 2, "--micro-batch-size", 2], 1),
        ("tp2·pp2", ["--tp", 2, "--micro-batch-size", 4, "--pp-schedule", "gpipe"], 0),
    ],
)
def test_pipeline_by_data_or_tensor_parallel_equals_single(
    label, args, syncs, tmp_path, reference_pipeline
):
    done, result, state = launch("nd", tmp_path, "--pp", 2, *PIPELINE_MODEL, *args, nproc=4)
    assert done.returncode == 0, done.stderr
    assert result["environment"]["layout"]["label"] == label
    assert [s["gradient_syncs"] for s in result["trials"][0]["steps"]] == [syncs] * 5
    assert_same_training(result, state, reference_pipeline)
    assert grad_norms(result) == pytest.approx(grad_norms(reference_pipeline[0]), rel=1e-5)
    # the first stage's ranks hold their rows of the embedding's gradient, not all of it
    assert abs(result["summary"]["model_state_estimate_error"]) < 0.001


@pytest.mark.parametrize("pp", [3, 4])
def test_tied_embeddings_across_three_and_four_stages_equal_single(
    pp, tmp_path, reference_pipeline
):
    """The embedding on the first stage and the head on the last share one weight: its
    gradient is summed over the group of those two ranks (pp > 2: not the pipeline's group)."""
    # the 4 sequences as 4 micro-batches: 3 stages need a count they can divide into m >= pp
    args = ["--pp", pp, *PIPELINE_MODEL, "--micro-batch-size", 4, "--pp-microbatches", 4]
    done, result, state = launch("nd", tmp_path, *args, nproc=pp)
    assert done.returncode == 0, done.stderr
    assert result["config"]["model"]["tie_embeddings"] is True
    assert_same_training(result, state, reference_pipeline)


def test_pipeline_by_data_parallel_in_bf16_follows_fp32(tmp_path, reference_pipeline):
    """dp2·pp2 under bf16 (FSDP's bf16 parameters, fp32 reductions) stays within bf16's
    rounding of the fp32 losses."""
    args = ["--pp", 2, "--dp-shard", 2, *PIPELINE_MODEL, "--micro-batch-size", 2]
    done, result, _ = launch("nd", tmp_path, *args, "--precision", "bf16", nproc=4)
    assert done.returncode == 0, done.stderr
    assert result["config"]["training"]["precision"] == "bf16"
    assert losses(result) == pytest.approx(losses(reference_pipeline[0]), rel=2e-2)
