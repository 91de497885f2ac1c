"""Megatron's iteration log lines into numbers.

Megatron's ``training_log`` prints, from the last rank, one line every
``--log-interval`` iterations::

     iteration       10/     100 | consumed samples: 640 | elapsed time per iteration (ms): 812.3 |
     throughput per GPU (TFLOP/s/GPU): 101.2 | learning rate: 3.000000E-04 |
     global batch size: 64 | lm loss: 9.876543E+00 | loss scale: 1.0 | grad norm: 2.345 |
     number of skipped iterations: 0 | number of nan iterations: 0 |

(one line, often after a ``[date time]`` prefix). Fields are ``name: value``
pairs between ``|``; unknown fields are ignored, missing ones are absent.
"""

import math
import re

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
