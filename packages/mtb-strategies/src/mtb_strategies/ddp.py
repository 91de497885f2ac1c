"""``ddp``: torch DistributedDataParallel, gradients all-reduced in buckets.

Under accumulation ``auto`` means ``last``: ``no_sync`` on every micro-batch
but the final one. A comm hook counts the all-reduces DDP really issues.
"""

from mtb_strategies.data_parallel import TorchDataParallelStrategy


class DDPStrategy(TorchDataParallelStrategy):
    name = "ddp"
    description = "torch DistributedDataParallel (replicated model, bucketed all-reduce)"
    default_sync_mode = "last"

    def build_engine(self, model, make_optimizer, context, sync_mode: str):
        from mtb_strategies.ddp_engine import DDPEngine

        return DDPEngine.build(model, make_optimizer, context, sync_mode)
