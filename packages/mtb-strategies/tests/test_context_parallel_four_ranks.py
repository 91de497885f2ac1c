"""Context parallelism with the other mesh dimensions on 4 gloo ranks: cp 2 with tp 2, with
dp_shard 2 and with pp 2 each train as `single` does on the same batch."""

import pytest
from conftest import PIPELINE_MODEL, SGD, assert_same_training, launch

pytestmark = [pytest.mark.slow, pytest.mark.four_ranks, pytest.mark.timeout(1200)]


@pytest.mark.parametrize(
    ("args", "label"),
    [
        (["--cp", 2, "--tp", 2, "--micro-batch-size", 4], "cp2·tp2"),
        (["--cp", 2, "--dp-shard", 2, "--micro-batch-size", 2], "dp2·cp2"),
    ],
)
def test_cp_with_tp_or_dp_equals_single(args, label, tmp_path, reference_sgd):
    done, result, state = launch("nd", tmp_path, *args, *SGD, nproc=4)
    assert done.returncode == 0, done.stderr
    assert result["environment"]["layout"]["label"] == label
    assert result["trials"][0]["tokens_per_step"] == 4 * 32
    assert_same_training(result, state, reference_sgd)


def test_cp_by_pp_equals_single(tmp_path, reference_pipeline):
    args = ["--cp", 2, "--pp", 2, "--micro-batch-size", 4, *PIPELINE_MODEL]
    done, result, state = launch("nd", tmp_path, *args, nproc=4)
    assert done.returncode == 0, done.stderr
    assert result["environment"]["layout"]["label"] == "cp2·pp2"
    assert_same_training(result, state, reference_pipeline)
    for rank in result["trials"][0]["per_rank"]:
        metrics = rank["engine_metrics"]
        assert metrics["context_parallel"]["send_recv_bytes_per_step"] > 0
        assert metrics["pipeline"]["stages"] in ([0], [1])
