"""Summary statistics, cross-rank reduction, throughput and MFU arithmetic."""

import math

import pytest

from mtb.metrics import (
    gpu_peak_flops,
    max_across_ranks,
    mfu,
    summarize,
    tokens_per_second,
)


def test_summary_statistics():
    s = summarize([10.0, 12.0, 14.0])
    assert (s["n"], s["mean"], s["min"], s["p50"], s["max"]) == (3, 12.0, 10.0, 12.0, 14.0)
    assert s["std"] == pytest.approx(2.0)
    assert s["cv"] == pytest.approx(2.0 / 12.0)
    assert s["noisy"] is True


def test_single_value_and_empty_series():
    assert summarize([5.0])["std"] == 0.0 and summarize([5.0])["noisy"] is False
    assert summarize([])["mean"] is None


def test_quiet_series_is_not_noisy():
    assert summarize([100.0, 101.0, 99.0])["noisy"] is False


def test_step_time_is_the_slowest_rank():
    assert max_across_ranks([[1.0, 5.0, 2.0], [3.0, 1.0, 2.5]]) == [3.0, 5.0, 2.5]
    with pytest.raises(ValueError):
        max_across_ranks([[1.0], [1.0, 2.0]])


def test_tokens_per_second_uses_total_time():
    assert tokens_per_second(1000, [100.0, 300.0]) == pytest.approx(5000.0)
    assert math.isnan(tokens_per_second(1000, [0.0]))


def test_mfu_and_peak_table():
    assert mfu(1000.0, 6_000_000, 12e9) == pytest.approx(0.5)
    assert mfu(1000.0, 6_000_000, None) is None
    assert gpu_peak_flops("NVIDIA H100 80GB HBM3", "bf16") == 989e12
    assert gpu_peak_flops("NVIDIA H100 PCIe", "bf16") == 756e12
    assert gpu_peak_flops("NVIDIA H200", "bf16") == 989e12
    assert gpu_peak_flops("NVIDIA A100-SXM4-80GB", "fp32") == 19.5e12
    assert gpu_peak_flops("Some Future GPU", "bf16") is None
    assert gpu_peak_flops("Tesla V100", "bf16") is None
