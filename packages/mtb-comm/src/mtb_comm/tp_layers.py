"""Tensor-parallel layers built from full weights, and the single-device references.

ColumnParallelLinear splits the output dimension (each rank a block of
rows of W), RowParallelLinear the input dimension (a block of columns, the
partial outputs summed across ranks). With sequence parallelism the
activations outside the two linears are sharded along the sequence
(dim 0 of [seq, batch, hidden], as in Megatron-LM): an all-gather before the
column layer, a reduce-scatter after the row layer, LayerNorm on the shards.
Parameters that every rank holds whole but sees only a sequence shard of
(LayerNorm, the row layer's bias) get their gradients summed afterwards.
"""

import torch
import torch.nn.functional as F
from torch import nn

from mtb_comm import tp_comm


def shard(full, dim: int, index: int, world: int):
    """Block ``index`` of ``world`` equal blocks of ``full`` along ``dim``."""
    return nn.Parameter(full.chunk(world, dim=dim)[index].clone())


class ColumnParallelLinear(nn.Module):
    """y = x W^T + b with W split by output rows; optionally gather the full output."""

    def __init__(self, weight, bias, index, world, tally, gather_output, sequence_parallel):
        super().__init__()
        self.weight = shard(weight, 0, index, world)
        self.bias = shard(bias, 0, index, world)
        self.tally = tally
        self.gather_output, self.sequence_parallel = gather_output, sequence_parallel

    def forward(self, x):
        enter = tp_comm.GatherFromSequence if self.sequence_parallel else tp_comm.CopyToRegion
        y = F.linear(enter.apply(x, self.tally), self.weight, self.bias)
        return tp_comm.GatherFromRegion.apply(y, self.tally) if self.gather_output else y


class RowParallelLinear(nn.Module):
    """y = sum over ranks of x_r W_r^T, + b; x split along features (or split here)."""

    def __init__(self, weight, bias, index, world, tally, input_is_parallel, sequence_parallel):
        super().__init__()
        self.weight = shard(weight, 1, index, world)
        self.bias = nn.Parameter(bias.clone())
        self.tally = tally
        self.input_is_parallel, self.sequence_parallel = input_is_parallel, sequence_parallel

    def forward(self, x):
        if not self.input_is_parallel:
            x = tp_comm.ScatterToRegion.apply(x, self.tally)
        partial = F.linear(x, self.weight)
        leave = tp_comm.ReduceFromRegion
        if self.sequence_parallel:
            leave = tp_comm.ReduceScatterToSequence
        return leave.apply(partial, self.tally) + self.bias


class ParallelMLP(nn.Module):
    """Column (no gather), GELU, row (parallel input): one all-reduce each way."""

    def __init__(self, weights, index, world, tally, sequence_parallel=False):
        super().__init__()
        self.fc1 = ColumnParallelLinear(
            weights["fc1.weight"],
            weights["fc1.bias"],
            index,
            world,
            tally,
            False,
            sequence_parallel,
        )
        self.fc2 = RowParallelLinear(
            weights["fc2.weight"],
            weights["fc2.bias"],
            index,
            world,
            tally,
            True,
            sequence_parallel,
        )

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class SequenceParallelBlock(nn.Module):
    """LayerNorm on the sequence shard, then the MLP with sequence-parallel regions."""

    def __init__(self, weights, index, world, tally):
        super().__init__()
        self.norm = nn.LayerNorm(weights["norm.weight"].shape[0])
        with torch.no_grad():
            self.norm.weight.copy_(weights["norm.weight"])
            self.norm.bias.copy_(weights["norm.bias"])
        self.mlp = ParallelMLP(weights, index, world, tally, sequence_parallel=True)
        self.tally = tally

    def forward(self, x):
        return self.mlp(self.norm(x))

    def replicated_parameters(self) -> list:
        return [self.norm.weight, self.norm.bias, self.mlp.fc2.bias]

    def sync_replicated_grads(self) -> None:
        """Sum the sequence-shard gradients of the replicated parameters (one all-reduce)."""
        params = self.replicated_parameters()
        flat = torch.cat([p.grad.flatten() for p in params])
        flat = tp_comm.all_reduce(flat, self.tally, "grad_sync")
        for param, piece in zip(params, flat.split([p.numel() for p in params]), strict=True):
            param.grad.copy_(piece.view_as(param))


def reference_mlp(x, weights):
    hidden = F.gelu(F.linear(x, weights["fc1.weight"], weights["fc1.bias"]))
    return F.linear(hidden, weights["fc2.weight"], weights["fc2.bias"])


def reference_block(x, weights):
    normed = F.layer_norm(x, x.shape[-1:], weights["norm.weight"], weights["norm.bias"])
    return reference_mlp(normed, weights)
