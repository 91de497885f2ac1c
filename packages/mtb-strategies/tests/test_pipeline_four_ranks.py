"""Pipeline parallel composed with data and tensor parallelism (strategy nd, 4 gloo ranks)."""

import pytest
from conftest import PIPELINE_MODEL, assert_same_training, grad_norms, launch

pytestmark = [pytest.mark.slow, pytest.mark.four_ranks, pytest.mark.timeout(1200)]


@pytest.mark.parametrize(
    ("label", "args"),
    [
        # two data-parallel ranks of 2 sequences each: the reference's 4
        ("dp2·pp2", ["--dp-shard", 2, "--micro-batch-size", 2]),
        ("tp2·pp2", ["--tp", 2, "--micro-batch-size", 4, "--pp-schedule", "gpipe"]),
    ],
)
def test_pipeline_by_data_or_tensor_parallel_equals_single(
    label, args, tmp_path, reference_pipeline
):
    done, result, state = launch("nd", tmp_path, "--pp", 2, *PIPELINE_MODEL, *args, nproc=4)
    assert done.returncode == 0, done.stderr
    assert result["environment"]["layout"]["label"] == label
    assert_same_training(result, state, reference_pipeline)
    assert grad_norms(result) == pytest.approx(grad_norms(reference_pipeline[0]), rel=1e-5)
