"""What ddp and fsdp share: a default sync mode, checked before launch."""

from mtb.strategy import Strategy
from mtb_strategies.sync_modes import resolve_sync_mode


class TorchDataParallelStrategy(Strategy):
    """A torch.distributed data-parallel strategy; subclasses name their default mode."""

    default_sync_mode = "every"

    def resolve_sync(self, requested: str) -> str:
        return resolve_sync_mode(requested, self.default_sync_mode, ("every", "last"), self.name)

    def check(self, config, device_type: str) -> None:
        super().check(config, device_type)
        self.resolve_sync(config.training.gradient_sync_mode)

    def build_engine(self, model, make_optimizer, context, sync_mode: str):
        raise NotImplementedError

    def setup(self, model, make_optimizer, context):
        mode = self.resolve_sync(context.config.training.gradient_sync_mode)
        return self.build_engine(model, make_optimizer, context, mode)
