"""The CPU peak MFU divides by: shapes from the model, the rank's threads, a record of how."""

import pytest
import torch

from mtb import calibration
from mtb.config import ModelConfig
from mtb.model import largest_linear
from mtb.presets import PRESETS

pytestmark = pytest.mark.timeout(60)


def test_the_small_preset_is_calibrated_on_its_lm_head_in_every_orientation():
    head = largest_linear(ModelConfig(**PRESETS["small"]), tokens=2 * 256)
    assert head == (512, 512, 8192)  # micro-batch 2 x seq 256 tokens, d_model -> vocab
    assert calibration.gemms(head) == [(512, 512, 8192), (512, 8192, 512), (8192, 512, 512)]


def test_a_model_smaller_than_the_floor_is_calibrated_on_the_floor():
    tiny = largest_linear(ModelConfig(**PRESETS["tiny"]), tokens=64)
    assert tiny == (64, 32, 256)
    assert calibration.gemms(tiny)[0] == calibration.FLOOR


def test_the_measurement_records_threads_dtype_shapes_rounds_and_the_best_rate():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        record = calibration.measure((64, 32, 256))
    finally:
        torch.set_num_threads(threads)
    assert record["threads"] == 1
    assert record["dtype"] == "fp32"
    assert record["gemms_mkn"] == [[1024, 1024, 1024]] * 3
    assert 1 <= record["rounds"] <= calibration.ROUNDS
    assert record["flops"] == max(record["flops_per_gemm"]) > 0
    assert record["seconds"] < 30
