"""Tensor and sequence parallelism of GPT blocks with ``parallelize_module``.

Megatron-LM's split: q/k/v (the model keeps each head's rows together, so a
column split is a split by heads) and the MLP's up projection column-parallel, the
attention output and MLP down projection row-parallel, so each block costs one
all-reduce in forward and one in backward per sub-layer. With sequence
parallelism the norms and dropout run on sequence shards, and those
all-reduces become an all-gather and a reduce-scatter (as torchtitan does).

The token embedding and the (tied) head are split by vocabulary rows, the
logits gathered whole; the position embedding, the final norm and the loss
stay replicated on the tp ranks, which compute them alike from the same batch.
"""

from torch import nn
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    PrepareModuleInputOutput,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

#: the linears of a block's attention, which tensor parallelism shards in every block
ATTENTION_LINEARS = ("attn.qkv", "attn.proj")
#: a dense MLP's linears, sharded too; an MoE layer (router and experts) stays whole on
#: every tp rank, which all route the same tokens
MLP_LINEARS = ("mlp.fc", "mlp.proj")


def block_plan(sequence_parallel: bool, dense: bool = True) -> dict:
    """The parallelize_module plan of one block (``dense``: an MLP, not an MoE layer)."""
    mlp = {"mlp.fc": ColwiseParallel(), "mlp.proj": RowwiseParallel()} if dense else {}
    if not sequence_parallel:
        return {"attn.qkv": ColwiseParallel(), "attn.proj": RowwiseParallel(), **mlp}
    gather = PrepareModuleInput(
        input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
    )
    if dense:
        mlp = {
            "mlp": gather,
            "mlp.fc": ColwiseParallel(),
            "mlp.proj": RowwiseParallel(output_layouts=Shard(1)),
        }
    else:  # the whole sequence in, each rank's sequence shard of the (replicated) result out
        mlp = {
            "mlp": PrepareModuleInputOutput(
                input_layouts=(Shard(1),),
                desired_input_layouts=(Replicate(),),
                use_local_input=True,
                output_layouts=(Replicate(),),
                desired_output_layouts=(Shard(1),),
                use_local_output=True,
            )
        }
    return {
        "ln1": SequenceParallel(),
        "attn": gather,
        "attn.qkv": ColwiseParallel(),
        "attn.proj": RowwiseParallel(output_layouts=Shard(1)),
        "ln2": SequenceParallel(),
        **mlp,
    }


def _names(module: nn.Module) -> set[str]:
    return {name for name, _ in module.named_modules()}


def is_block(module: nn.Module) -> bool:
    """A GPT block: its attention's linears are there."""
    return all(linear in _names(module) for linear in ATTENTION_LINEARS)


def is_dense(block: nn.Module) -> bool:
    """A block whose feed-forward is an MLP (not an MoE layer)."""
    return all(linear in _names(block) for linear in MLP_LINEARS)


def parallelize_vocabulary(module: nn.Module, tp_mesh) -> None:
    """Split the token embedding and the head by vocabulary rows (tied: one weight).

    The embedding is row-parallel (each rank looks up its rows, the partial
    sums are all-reduced); the head is column-parallel with its logits
    gathered, so the loss sees whole logits. A tied head is tied again to the
    embedding's sharded weight.
    """
    embedding, head = getattr(module, "tok_emb", None), getattr(module, "head", None)
    tied = embedding is not None and head is not None and head.weight is embedding.weight
    if embedding is not None:
        parallelize_module(embedding, tp_mesh, RowwiseParallel(input_layouts=Replicate()))
    if head is not None:
        parallelize_module(head, tp_mesh, ColwiseParallel(output_layouts=Replicate()))
    if tied:
        head.weight = embedding.weight


def parallelize(module: nn.Module, tp_mesh, sequence_parallel: bool) -> nn.Module:
    """Tensor-parallelize every GPT block in ``module`` (a whole model or a pipeline stage).

    Under sequence parallelism the run of blocks takes and returns replicated
    activations: the first block keeps its sequence shard of the input (no
    communication), the last all-gathers its output, so whatever surrounds
    the blocks is unchanged.
    """
    parallelize_vocabulary(module, tp_mesh)
    blocks = [m for m in module.modules() if is_block(m)]
    for block in blocks:
        parallelize_module(block, tp_mesh, block_plan(sequence_parallel, is_dense(block)))
    if sequence_parallel and blocks:
        split = PrepareModuleInput(
            input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),), use_local_output=True
        )
        parallelize_module(blocks[0], tp_mesh, split)
        gather = PrepareModuleOutput(
            output_layouts=(Shard(1),), desired_output_layouts=(Replicate(),)
        )
        parallelize_module(blocks[-1], tp_mesh, gather)
    return module


def place_grads_like_params(module: nn.Module) -> None:
    """Give every gradient its parameter's placements, once per step.

    Two gradients come back from torch placed otherwise than their weights:
    the sequence-parallel norms' weights are replicated but each rank's
    gradient covers only its sequence shard (Partial: summed here), and a
    vocabulary-split embedding's gradient comes back whole on every tp rank
    (Replicate: each keeps its own rows, no communication). Done before the
    gradient norm and the optimizer read them, so a rank holds and updates
    only its share.
    """
    for param in module.parameters():
        placements = getattr(param, "placements", None)
        given = getattr(param.grad, "placements", None)
        if placements is None or given is None:
            continue
        if tuple(given) != tuple(placements):
            param.grad = param.grad.redistribute(placements=placements)
