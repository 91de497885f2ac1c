"""Metric records and their arithmetic: summaries, throughput, MFU.

Definitions follow DESIGN: a step's time is the max across ranks, warmup
steps are excluded, tokens/s is global tokens per step over step time, MFU
uses PaLM's FLOPs per token over the peak of the device.
"""

import math
import statistics

import attrs

NOISY_CV = 0.05


@attrs.define
class StepMetrics:
    """One rank's timings and loss for one optimizer step."""

    step: int
    warmup: bool
    data_ms: float
    forward_backward_ms: float
    optimizer_ms: float
    step_ms: float
    loss: float
    tokens: int
    lr: float = 0.0
    grad_norm: float | None = None
    clipped: bool = False
    skipped: bool = False
    gradient_syncs: int | None = None
    #: wall time spent in torch.compile during the step (--compile; 0 when eager)
    compile_ms: float = 0.0
    #: routing and all_to_all figures of the MoE layers (None: a dense model), see mtb.moe
    moe: dict | None = None


#: the per-step MoE figures the summary averages over a trial's measured steps
MOE_SUMMARY = (
    "dropped_fraction",
    "imbalance",
    "aux_loss",
    "all_to_all_bytes",
    "all_to_all_ms",
    "dispatch_combine_share",
)


def moe_step(per_rank: list[dict], step_ms: float) -> dict:
    """One step's MoE figures over every rank's (see mtb.moe.take_step).

    Tokens per expert are summed over ranks, per layer; min, mean and max
    run over every expert of every layer; imbalance (max / mean) is the
    worst layer's; the dropped fraction counts assignments (tokens x k) past
    capacity; all_to_all bytes (also summed over ranks) and time are the
    busiest rank's, and their share is of the step time (the max across ranks).
    """
    layers = [
        [sum(column) for column in zip(*layer, strict=True)]
        for layer in zip(*(r["tokens_per_expert"] for r in per_rank), strict=True)
    ]
    loads = [tokens for layer in layers for tokens in layer]
    assigned = sum(r["assigned"] for r in per_rank)
    a2a_ms = max(r["all_to_all_ms"] for r in per_rank)
    return {
        "tokens_per_expert": layers,
        "tokens_per_expert_min": min(loads),
        "tokens_per_expert_mean": statistics.fmean(loads),
        "tokens_per_expert_max": max(loads),
        "dropped_fraction": (assigned - sum(loads)) / assigned if assigned else 0.0,
        "imbalance": max(max(layer) / statistics.fmean(layer) for layer in layers),
        "aux_loss": statistics.fmean(r["aux_loss"] for r in per_rank),
        "all_to_all_bytes": max(r["all_to_all_bytes"] for r in per_rank),
        "all_to_all_bytes_total": sum(r["all_to_all_bytes"] for r in per_rank),
        "all_to_all_ms": a2a_ms,
        "dispatch_combine_share": a2a_ms / step_ms if step_ms else 0.0,
    }


def summarize(values: list[float]) -> dict:
    """mean, std (sample), min, p50, max, cv and the noisy flag of one series."""
    if not values:
        return {
            "n": 0,
            "mean": None,
            "std": None,
            "min": None,
            "p50": None,
            "max": None,
            "cv": None,
            "noisy": False,
        }
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    cv = std / mean if mean else 0.0
    return {
        "n": len(values),
        "mean": mean,
        "std": std,
        "min": min(values),
        "p50": statistics.median(values),
        "max": max(values),
        "cv": cv,
        "noisy": cv > NOISY_CV,
    }


def max_across_ranks(per_rank: list[list[float]]) -> list[float]:
    """Element-wise max over ranks: the time of each step as the slowest rank saw it."""
    return [max(values) for values in zip(*per_rank, strict=True)]


def tokens_per_second(tokens_per_step: int, step_ms: list[float]) -> float:
    """Global tokens/s over the measured steps (total tokens / total time)."""
    total_s = sum(step_ms) / 1000.0
    return tokens_per_step * len(step_ms) / total_s if total_s > 0 else math.nan


def mfu(tokens_per_s_per_device: float, flops_per_token: int, peak_flops: float | None):
    """Model FLOPs utilisation in [0, 1]; None when the peak is unknown."""
    if not peak_flops:
        return None
    return tokens_per_s_per_device * flops_per_token / peak_flops


def above_peak(mfu_value: float | None) -> bool:
    """Whether an MFU exceeds 100 %: the peak it divides by cannot be the device's."""
    return mfu_value is not None and mfu_value > 1.0


# Dense (non-sparse) peak TFLOP/s per GPU model and compute dtype.
GPU_PEAK_TFLOPS: dict[str, dict[str, float | None]] = {
    "H200": {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},
    "H100 PCIe": {"bf16": 756.0, "fp16": 756.0, "fp32": 51.0},
    "H100": {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},
    "A100": {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
    "L40S": {"bf16": 362.0, "fp16": 362.0, "fp32": 91.6},
    "A10": {"bf16": 125.0, "fp16": 125.0, "fp32": 31.2},
    "V100": {"bf16": None, "fp16": 125.0, "fp32": 15.7},
}


def gpu_peak_flops(device_name: str, precision: str) -> float | None:
    """Peak FLOP/s of a GPU model from the table, matching the longest key first."""
    for key in sorted(GPU_PEAK_TFLOPS, key=len, reverse=True):
        if key in device_name:
            tflops = GPU_PEAK_TFLOPS[key].get(precision)
            return tflops * 1e12 if tflops else None
    return None
