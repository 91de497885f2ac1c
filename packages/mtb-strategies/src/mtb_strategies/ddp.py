"""``ddp``: torch DistributedDataParallel, gradients all-reduced in buckets.

Under accumulation ``auto`` means ``last``: ``no_sync`` on every micro-batch
but the final one. A comm hook counts the all-reduces DDP really issues.
"""

from mtb.strategy import Strategy
from mtb_strategies.sync_modes import resolve_sync_mode


class DDPStrategy(Strategy):
    name = "ddp"
    description = "torch DistributedDataParallel (replicated model, bucketed all-reduce)"

    def resolve_sync(self, requested: str) -> str:
        return resolve_sync_mode(requested, "last", ("every", "last"), self.name)

    def check(self, config, device_type: str) -> None:
        super().check(config, device_type)
        self.resolve_sync(config.training.gradient_sync_mode)

    def setup(self, model, make_optimizer, context):
        from mtb_strategies.ddp_engine import DDPEngine

        mode = self.resolve_sync(context.config.training.gradient_sync_mode)
        return DDPEngine.build(model, make_optimizer, context, mode)
