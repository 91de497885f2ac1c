"""The tensor- and sequence-parallel communication regions, as autograd functions.

Megatron-LM's four TP mappings (copy to / reduce from / scatter to / gather
from the TP region) and the two sequence-parallel ones (gather from /
reduce-scatter to the sequence-parallel region). Each collective it issues,
forward or backward, is counted in a Collectives tally so a check can
compare what ran with what the layout promises.
"""

import collections

import torch
import torch.distributed as dist


class Collectives:
    """Counts of collectives issued, by phase (forward, backward, grad_sync) and operation."""

    def __init__(self):
        self.counts = collections.defaultdict(collections.Counter)

    def add(self, phase: str, operation: str) -> None:
        self.counts[phase][operation] += 1

    def as_dict(self) -> dict:
        return {phase: dict(sorted(ops.items())) for phase, ops in self.counts.items()}


def _rank_world():
    return dist.get_rank(), dist.get_world_size()


def all_reduce(x, tally, phase):
    """Sum of ``x`` over ranks (a contiguous copy when ``x`` is not)."""
    tally.add(phase, "all_reduce")
    x = x.contiguous()
    dist.all_reduce(x)
    return x


def _all_gather(x, dim, tally, phase):
    """Concatenate every rank's ``x`` along ``dim``."""
    tally.add(phase, "all_gather")
    _, world = _rank_world()
    moved = x.movedim(dim, 0).contiguous()
    out = torch.empty((world * moved.shape[0], *moved.shape[1:]), dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(out, moved)
    return out.movedim(0, dim).contiguous()


def _reduce_scatter(x, dim, tally, phase):
    """Sum over ranks, keep this rank's chunk along ``dim``."""
    tally.add(phase, "reduce_scatter")
    _, world = _rank_world()
    moved = x.movedim(dim, 0).contiguous()
    out = torch.empty((moved.shape[0] // world, *moved.shape[1:]), dtype=x.dtype, device=x.device)
    dist.reduce_scatter_tensor(out, moved)
    return out.movedim(0, dim).contiguous()


def _split(x, dim):
    rank, world = _rank_world()
    return x.chunk(world, dim=dim)[rank].contiguous()


class CopyToRegion(torch.autograd.Function):
    """Identity forward; all-reduce of the input gradient backward."""

    @staticmethod
    def forward(ctx, x, tally):
        ctx.tally = tally
        return x

    @staticmethod
    def backward(ctx, grad):
        return all_reduce(grad, ctx.tally, "backward"), None


class ReduceFromRegion(torch.autograd.Function):
    """All-reduce of partial outputs forward; identity backward."""

    @staticmethod
    def forward(ctx, x, tally):
        return all_reduce(x.clone(), tally, "forward")

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class ScatterToRegion(torch.autograd.Function):
    """Keep this rank's slice of the last dimension; all-gather backward."""

    @staticmethod
    def forward(ctx, x, tally):
        ctx.tally = tally
        return _split(x, -1)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather(grad, -1, ctx.tally, "backward"), None


class GatherFromRegion(torch.autograd.Function):
    """All-gather along the last dimension; keep this rank's slice backward."""

    @staticmethod
    def forward(ctx, x, tally):
        return _all_gather(x, -1, tally, "forward")

    @staticmethod
    def backward(ctx, grad):
        return _split(grad, -1), None


class GatherFromSequence(torch.autograd.Function):
    """All-gather of sequence shards (dim 0) forward; reduce-scatter backward."""

    @staticmethod
    def forward(ctx, x, tally):
        ctx.tally = tally
        return _all_gather(x, 0, tally, "forward")

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter(grad, 0, ctx.tally, "backward"), None


class ReduceScatterToSequence(torch.autograd.Function):
    """Reduce-scatter of partial outputs into sequence shards forward; all-gather backward."""

    @staticmethod
    def forward(ctx, x, tally):
        ctx.tally = tally
        return _reduce_scatter(x, 0, tally, "forward")

    @staticmethod
    def backward(ctx, grad):
        return _all_gather(grad, 0, ctx.tally, "backward"), None
