"""Megatron's iteration log lines into numbers.

Megatron's ``training_log`` prints, from the last rank, one line every
``--log-interval`` iterations::

     iteration       10/     100 | consumed samples: 640 | elapsed time per iteration (ms): 812.3 |
     throughput per GPU (TFLOP/s/GPU): 101.2 | learning rate: 3.000000E-04 |
     global batch size: 64 | lm loss: 9.876543E+00 | loss scale: 1.0 | grad norm: 2.345 |
     number of skipped iterations: 0 | number of nan iterations: 0 |

(one line, often after a ``[date time]`` prefix). Fields are ``name: value``
pairs between ``|``; unknown fields are ignored, missing ones are absent.

``report_memory`` (megatron/training/utils.py) prints, from the ranks of
data-parallel rank 0, after the first logged iterations, one line::

    [Rank 0] (after 10 iterations) memory (MB) | allocated: 1234.56 |
    max allocated: 2345.67 | reserved: 3000.00 | max reserved: 3000.00

(``{:.2f}`` since megatron-core 0.16, the full float before).
"""

import math
import re

NUMBER = r"([0-9][0-9.eE+-]*)"
MEMORY = re.compile(
    rf"\[Rank (\d+)\] \((.*?)\) memory \(MB\) \| allocated: {NUMBER} \| max allocated: {NUMBER}"
    rf" \| reserved: {NUMBER} \| max reserved: {NUMBER}"
)
MEMORY_KEYS = ("allocated_mb", "max_allocated_mb", "reserved_mb", "max_reserved_mb")
ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)$")
FIELDS = {
    "consumed samples": ("consumed_samples", int),
    "elapsed time per iteration (ms)": ("elapsed_ms_per_iteration", float),
    "throughput per GPU (TFLOP/s/GPU)": ("throughput_tflops_per_gpu", float),
    "learning rate": ("learning_rate", float),
    "global batch size": ("global_batch_size", int),
    "lm loss": ("lm_loss", float),
    "loss scale": ("loss_scale", float),
    "grad norm": ("grad_norm", float),
    "number of skipped iterations": ("skipped_iterations", int),
    "number of nan iterations": ("nan_iterations", int),
}


def _value(kind, text: str):
    """The number, or None when it does not parse or is not finite (JSON has no NaN)."""
    try:
        value = kind(text)
    except ValueError:
        return None
    return value if kind is int or math.isfinite(value) else None


def parse_line(line: str) -> dict | None:
    """One iteration line's fields, or None for any other line."""
    match = ITERATION.search(line)
    if not match:
        return None
    record = {"iteration": int(match[1]), "train_iters": int(match[2])}
    for part in match[3].split("|"):
        name, sep, text = part.partition(":")
        if sep and name.strip() in FIELDS:
            key, kind = FIELDS[name.strip()]
            record[key] = _value(kind, text.strip())
    return record


def parse_log(text: str) -> list[dict]:
    """Every iteration line of a log, in order."""
    return [r for r in map(parse_line, text.splitlines()) if r is not None]


def parse_memory(text: str) -> list[dict]:
    """Every ``report_memory`` line of a log, in order: rank, label and the four values (MB)."""
    reports = []
    for match in MEMORY.finditer(text):
        values = dict(zip(MEMORY_KEYS, (_value(float, v) for v in match.groups()[2:]), strict=True))
        reports.append({"rank": int(match[1]), "label": match[2], **values})
    return reports
