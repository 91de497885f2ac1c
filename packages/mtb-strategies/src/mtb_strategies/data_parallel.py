"""What ddp and fsdp share: a default sync mode, checked before launch, and a lazy engine."""

import importlib

from mtb.api import Strategy
from mtb_strategies.sync_modes import resolve_sync_mode


class TorchDataParallelStrategy(Strategy):
    """A torch.distributed data-parallel strategy.

    Subclasses name their default sync mode and their engine classes (plain
    and expert-parallel) as ``"module:Class"``; the module (which imports
    torch) loads only at setup.
    """

    default_sync_mode = "every"
    engine = ""
    #: the engine with the experts of MoE layers sharded over the ep ranks (``--ep`` > 1)
    expert_parallel_engine = ""
    parallel_dims = ("ep",)
    trains_moe = True

    def resolve_sync(self, requested: str) -> str:
        return resolve_sync_mode(requested, self.default_sync_mode, ("every", "last"), self.name)

    def check(self, config, device_type: str) -> None:
        super().check(config, device_type)
        self.resolve_sync(config.training.gradient_sync_mode)

    def setup(self, model, make_optimizer, context):
        path = self.expert_parallel_engine if context.layout.ep > 1 else self.engine
        module, _, cls = path.partition(":")
        engine_class = getattr(importlib.import_module(module), cls)
        mode = self.resolve_sync(context.config.training.gradient_sync_mode)
        return engine_class.build(model, make_optimizer, context, mode)
