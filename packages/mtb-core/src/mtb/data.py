"""Deterministic synthetic token batches.

A batch depends only on (seed, global step, micro-step, data-parallel rank)
and the batch geometry. Each sequence is drawn from its own seed, mixed from
(seed, step, global sample index), where the sample index counts through the
global batch as ``(micro_step * dp_world_size + dp_rank) * micro_batch + j``.
So one step's global batch holds the same sequences however it is split into
ranks and micro-batches: single with 4B, two ranks with 2B, or two ranks
accumulating two micro-batches of B train on identical data.

Sequences are arithmetic progressions modulo the vocabulary with a random
start and stride, so the loss can fall (the model has something to learn).
"""

import attrs
import torch

from mtb.seeding import mix_seed

MAX_STRIDE = 7


def sample_seed(seed: int, step: int, sample: int) -> int:
    """A 63-bit generator seed mixed from the coordinates of one sequence."""
    return mix_seed(seed, step, sample)


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
    dp_world_size: int = 1
    device: torch.device = attrs.field(factory=lambda: torch.device("cpu"))

    def first_sample(self, micro_step: int) -> int:
        """Global index of this rank's first sequence in the micro-step."""
        return (micro_step * self.dp_world_size + self.dp_rank) * self.micro_batch_size

    def _start_and_stride(self, step: int, sample: int) -> tuple[int, int]:
        gen = torch.Generator().manual_seed(sample_seed(self.seed, step, sample))
        start = int(torch.randint(self.vocab_size, (1,), generator=gen))
        return start, int(torch.randint(1, MAX_STRIDE + 1, (1,), generator=gen))

    def batch(self, step: int, micro_step: int) -> Batch:
        first = self.first_sample(micro_step)
        pairs = [self._start_and_stride(step, first + j) for j in range(self.micro_batch_size)]
        start, stride = torch.tensor(pairs).unsqueeze(-1).unbind(1)
        positions = torch.arange(self.seq_len + 1).unsqueeze(0)
        tokens = (start + stride * positions) % self.vocab_size
        tokens = tokens.to(self.device, non_blocking=True)
        return Batch(tokens[:, :-1], tokens[:, 1:])
