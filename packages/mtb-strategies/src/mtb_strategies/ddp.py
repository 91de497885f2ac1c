"""``ddp``: torch DistributedDataParallel, gradients all-reduced in buckets.

Under accumulation ``auto`` means ``last``: ``no_sync`` on every micro-batch
but the final one. A comm hook counts the all-reduces DDP really issues.
"""

from mtb_strategies.data_parallel import TorchDataParallelStrategy


class DDPStrategy(TorchDataParallelStrategy):
    name = "ddp"
    description = "torch DistributedDataParallel (replicated model, bucketed all-reduce)"
    engine = "mtb_strategies.ddp_engine:DDPEngine"
    expert_parallel_engine = "mtb_strategies.ddp_engine:ExpertParallelDDPEngine"
    default_sync_mode = "last"
