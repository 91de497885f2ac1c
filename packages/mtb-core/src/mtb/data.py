"""Deterministic token batches: synthetic, or windows of a token file.

A batch depends only on (seed, global step, micro-step, data-parallel rank)
and the batch geometry. Each sequence is drawn from its own seed, mixed from
(seed, step, global sample index), where the sample index counts through the
global batch as ``(micro_step * dp_world_size + dp_rank) * micro_batch + j``.
So one step's global batch holds the same sequences however it is split into
ranks and micro-batches: single with 4B, two ranks with 2B, or two ranks
accumulating two micro-batches of B train on identical data.

Synthetic sequences are arithmetic progressions modulo the vocabulary with a
random start and stride, so the loss can fall (the model has something to
learn). A token file's sequences are windows of ``seq_len + 1`` tokens at a
start drawn from the same seed, so real data keeps both properties, and an
exact resume needs no data position in the checkpoint: the step says it all.
"""

import abc

import attrs
import numpy as np
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
class GlobalBatch(abc.ABC):
    """The micro-batch for (step, micro_step) on one data-parallel rank; subclasses say
    what sequence each global sample index holds (``sequences``)."""

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

    def generator(self, step: int, sample: int) -> torch.Generator:
        return torch.Generator().manual_seed(sample_seed(self.seed, step, sample))

    @abc.abstractmethod
    def sequences(self, step: int, samples: range) -> torch.Tensor:
        """``len(samples)`` rows of ``seq_len + 1`` token ids (int64)."""

    def batch(self, step: int, micro_step: int) -> Batch:
        first = self.first_sample(micro_step)
        tokens = self.sequences(step, range(first, first + self.micro_batch_size))
        tokens = tokens.to(self.device, non_blocking=True)
        return Batch(tokens[:, :-1], tokens[:, 1:])


@attrs.define
class SyntheticTokens(GlobalBatch):
    """Arithmetic progressions modulo ``vocab_size``: nothing to read."""

    def _start_and_stride(self, step: int, sample: int) -> tuple[int, int]:
        gen = self.generator(step, sample)
        start = int(torch.randint(self.vocab_size, (1,), generator=gen))
        return start, int(torch.randint(1, MAX_STRIDE + 1, (1,), generator=gen))

    def sequences(self, step: int, samples: range) -> torch.Tensor:
        pairs = [self._start_and_stride(step, sample) for sample in samples]
        start, stride = torch.tensor(pairs).unsqueeze(-1).unbind(1)
        positions = torch.arange(self.seq_len + 1).unsqueeze(0)
        return (start + stride * positions) % self.vocab_size


@attrs.define(kw_only=True)
class TokenWindows(GlobalBatch):
    """Windows of ``seq_len + 1`` consecutive tokens of a 1-D token array (a numpy memmap:
    only the windows drawn are read), starting anywhere, across document boundaries
    as nanoGPT and Megatron-LM sample them."""

    tokens: np.ndarray  # 1-D, integer ids below vocab_size (checked before launch)

    def sequences(self, step: int, samples: range) -> torch.Tensor:
        span = self.seq_len + 1
        starts = [
            int(torch.randint(len(self.tokens) - span + 1, (1,), generator=self.generator(step, s)))
            for s in samples
        ]
        rows = [torch.from_numpy(self.tokens[a : a + span].astype("int64")) for a in starts]
        return torch.stack(rows)
