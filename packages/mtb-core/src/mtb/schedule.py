"""Learning-rate schedules: constant, or cosine decay after a linear warmup."""

import math


def lr_at(step: int, training, total_steps: int) -> float:
    """Learning rate for ``step`` (0-based) of a trial of ``total_steps`` steps."""
    if training.lr_schedule == "constant":
        return training.lr
    warmup = training.lr_warmup_steps
    if step < warmup:
        return training.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total_steps - warmup)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return training.min_lr + (training.lr - training.min_lr) * cosine
