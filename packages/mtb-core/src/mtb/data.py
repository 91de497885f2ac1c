"""Deterministic synthetic token batches.

A batch depends only on (seed, global step, micro-step, data-parallel rank):
the same run resumed, relaunched or resharded sees the same tokens, and two
strategies with the same data-parallel layout train on identical data.
Sequences are arithmetic progressions modulo the vocabulary with a random
start and stride, so the loss can fall (the model has something to learn).
"""

import attrs
import torch

MASK64 = (1 << 64) - 1
MAX_STRIDE = 7


def _splitmix64(value: int) -> int:
    value = (value + 0x9E3779B97F4A7C15) & MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & MASK64
    return value ^ (value >> 31)


def batch_seed(seed: int, step: int, micro_step: int, dp_rank: int) -> int:
    """A 63-bit generator seed mixed from the four coordinates of a batch."""
    mixed = 0
    for part in (seed, step, micro_step, dp_rank):
        mixed = _splitmix64(mixed ^ part)
    return mixed >> 1


@attrs.frozen
class Batch:
    inputs: torch.Tensor
    targets: torch.Tensor

    @property
    def tokens(self) -> int:
        return self.inputs.numel()


@attrs.define
class SyntheticTokens:
    """Produces the micro-batch for (step, micro_step) on one data-parallel rank."""

    vocab_size: int
    seq_len: int
    micro_batch_size: int
    seed: int
    dp_rank: int = 0
    device: torch.device = attrs.field(factory=lambda: torch.device("cpu"))

    def batch(self, step: int, micro_step: int) -> Batch:
        gen = torch.Generator().manual_seed(batch_seed(self.seed, step, micro_step, self.dp_rank))
        shape = (self.micro_batch_size, 1)
        start = torch.randint(self.vocab_size, shape, generator=gen)
        stride = torch.randint(1, MAX_STRIDE + 1, shape, generator=gen)
        positions = torch.arange(self.seq_len + 1).unsqueeze(0)
        tokens = (start + stride * positions) % self.vocab_size
        tokens = tokens.to(self.device, non_blocking=True)
        return Batch(tokens[:, :-1], tokens[:, 1:])
