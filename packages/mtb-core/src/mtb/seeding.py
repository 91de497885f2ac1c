"""Where every seed of a run comes from, derived in one place.

Model initialisation draws from ``data.seed`` alone, so every rank builds the
same replica. Training randomness (dropout) draws from a stream mixed from
(seed, data-parallel rank): each replica sees its own masks, as independent
workers would; ranks of one replica (a future tensor/pipeline split) share
the stream, so activations they hold in common stay equal.
"""

import random

import numpy as np
import torch

MASK64 = (1 << 64) - 1


def _splitmix64(value: int) -> int:
    value = (value + 0x9E3779B97F4A7C15) & MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & MASK64
    return value ^ (value >> 31)


def mix_seed(*parts: int) -> int:
    """A 63-bit generator seed mixed from integer coordinates (splitmix64 chain)."""
    mixed = 0
    for part in parts:
        mixed = _splitmix64(mixed ^ part)
    return mixed >> 1


def seed_everything(seed: int) -> None:
    """Seed every generator a run may draw from (Python, NumPy, torch on every device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def training_seed(seed: int, dp_rank: int) -> int:
    """The seed of one data-parallel rank's training randomness (dropout)."""
    return mix_seed(seed, dp_rank)


def seed_model_init(context) -> None:
    """Before building the model: the same stream on every rank."""
    seed_everything(context.config.data.seed)


def seed_training(context) -> None:
    """After the model is built and wrapped: this rank's own stream for training."""
    seed_everything(training_seed(context.config.data.seed, context.dp_rank))
