"""The FSDP2 engine (imports torch; loaded only when an fsdp run starts)."""

import contextlib

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter

from mtb.api import CountedSyncEngine, SyncCounter
from mtb_strategies.expert_parallel import ExpertParallel, ExpertParallelEngine


class CountingReduceScatter(DefaultReduceScatter):
    """FSDP's default reduce-scatter, counted (installed with set_custom_reduce_scatter)."""

    def __init__(self, counter: SyncCounter):
        self.counter = counter

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        self.counter.issued()
        return _reduce_scatter()(
            output=output_tensor, input=input_tensor, group=group, op=op, async_op=async_op
        )


def _reduce_scatter():
    """torch 2.13's reduce_scatter_single; torch 2.11 has only reduce_scatter_tensor."""
    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def shard(model, context, counter: SyncCounter, mesh=None, ignored=()):
    """fully_shard each block, then the root (embeddings, final norm, tied head).

    ``mesh``: the data-parallel mesh (1-D: FSDP; 2-D replicate x shard: HSDP);
    None shards over the whole world. ``ignored`` parameters (experts sharded
    by expert parallelism) stay as they are.
    """
    options = context.config.strategy_options
    policy = MixedPrecisionPolicy()
    if context.config.training.precision == "bf16":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    kwargs = {
        "reshard_after_forward": options.get("fsdp_reshard_after_forward", True),
        "mp_policy": policy,
        "mesh": mesh,
        "ignored_params": set(ignored),
    }
    for block in model.blocks.children():  # a GPT's list, or a pipeline stage's dict
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_custom_reduce_scatter(CountingReduceScatter(counter))
    return model


class FSDPEngine(CountedSyncEngine):
    @classmethod
    def build(cls, model, make_optimizer, context, sync_mode: str, ignored=()):
        counter = SyncCounter()
        sharded = shard(model, context, counter, ignored=ignored)
        return cls(sharded, make_optimizer(sharded.parameters()), context, sync_mode, counter)

    def autocast(self):
        """Precision comes from the MixedPrecisionPolicy, not autocast."""
        return contextlib.nullcontext()

    def sync_context(self, is_last_micro_batch: bool):
        self.model.set_requires_gradient_sync(self.sync_mode == "every" or is_last_micro_batch)
        return contextlib.nullcontext()

    def state_dict(self) -> dict:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        return {"model": model_state, "optimizer": optimizer_state}

    def full_model_state(self) -> dict:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(self.model, options=options)

    def load_state_dict(self, state: dict) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
        )


class ExpertParallelFSDPEngine(ExpertParallelEngine, FSDPEngine):
    """FSDP2 over the dense parameters; experts sharded over the ep ranks, left out of FSDP."""

    @classmethod
    def build(cls, model, make_optimizer, context, sync_mode: str, ignored=()):
        experts = ExpertParallel(context)
        experts.shard(model)
        engine = super().build(model, make_optimizer, context, sync_mode, experts.params)
        engine.expert_parallel = experts
        return engine
