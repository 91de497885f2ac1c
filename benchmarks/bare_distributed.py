"""The bare side of the distributed harness benchmark: a plain torchrun training loop.

``torchrun --standalone --nproc-per-node N bare_distributed.py STRATEGY CONFIG.json OUT.json``
trains mtb's model (``mtb.model.GPT``) on mtb's data (``mtb.data.SyntheticTokens``)
with AdamW, wrapped in DDP or FSDP2 exactly as mtb's ddp and fsdp strategies
wrap it, and nothing else: no clock, hooks, records, norms or checks. Rank 0
writes the end time of every step and the last loss (mean over ranks) to OUT.json.
"""

import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from harness import bare_optimizer_and_data

from mtb.api import GPT, config_from_dict


def reduce_scatter_single(output_tensor, input_tensor, group, op, async_op=False):
    """The reduce-scatter mtb's fsdp installs (gloo runs it natively), without the counting."""
    return dist.reduce_scatter_single(
        output=output_tensor, input=input_tensor, group=group, op=op, async_op=async_op
    )


def wrap(model: torch.nn.Module, strategy: str) -> torch.nn.Module:
    """DDP, or fully_shard on each block then the root (mtb's fsdp layout).

    Every unit, the root too, reshards after forward as mtb's fsdp does by default
    (``fsdp_reshard_after_forward``); torch's own default would keep the root gathered
    and spare the bare side one all-gather of the embeddings per step.
    """
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)
    from torch.distributed.fsdp import FSDPModule, fully_shard
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter

    class SingleReduceScatter(DefaultReduceScatter):
        __call__ = staticmethod(reduce_scatter_single)

    for block in model.blocks:
        fully_shard(block, reshard_after_forward=True)
    fully_shard(model, reshard_after_forward=True)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_custom_reduce_scatter(SingleReduceScatter())
    return model


def bare_step(model, optimizer, data, step: int) -> torch.Tensor:
    """One training step of the bare loop; its loss."""
    batch = data.batch(step, 0)
    loss = model(batch.inputs, batch.targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def main(strategy: str, config_path: str, out: str) -> None:
    config = config_from_dict(json.loads(Path(config_path).read_text()))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(config.data.seed)
    model = wrap(GPT(config.model), strategy)
    training = config.training
    optimizer, data = bare_optimizer_and_data(config, model, dp_rank=rank, dp_world_size=world)
    ends, loss = [], None
    for step in range(training.steps):
        loss = bare_step(model, optimizer, data, step)
        ends.append(time.perf_counter())
    mean_loss = loss.detach().clone()  # after the timed steps: the mean over ranks, as mtb's
    dist.all_reduce(mean_loss)
    if rank == 0:
        final_loss = float(mean_loss.item()) / world
        Path(out).write_text(json.dumps({"ends": ends, "final_loss": final_loss}))
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
