"""The DDP engine (imports torch; loaded only when a ddp run starts)."""

import contextlib

from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from mtb.engine import Engine
from mtb_strategies.sync_modes import SyncCounter


def counting_allreduce(counter: SyncCounter, bucket):
    """DDP's default bucket all-reduce, counted."""
    counter.issued()
    return default_hooks.allreduce_hook(None, bucket)


class DDPEngine(Engine):
    def __init__(self, model, optimizer, context, sync_mode: str):
        super().__init__(model, optimizer, context)
        self.sync_mode = sync_mode
        self.counter = SyncCounter()
        model.register_comm_hook(self.counter, counting_allreduce)

    @classmethod
    def build(cls, model, make_optimizer, context, sync_mode: str):
        device_ids = [context.device.index] if context.device.type == "cuda" else None
        wrapped = DistributedDataParallel(model, device_ids=device_ids)
        return cls(wrapped, make_optimizer(wrapped.parameters()), context, sync_mode)

    def details(self) -> dict:
        requested = self.context.config.training.gradient_sync_mode
        return {"gradient_sync_mode": {"requested": requested, "resolved": self.sync_mode}}

    def sync_context(self, is_last_micro_batch: bool):
        if self.sync_mode == "last" and not is_last_micro_batch:
            return self.model.no_sync()
        return contextlib.nullcontext()

    def backward(self, loss) -> None:
        self.counter.begin()
        super().backward(loss)
        self.counter.end()

    def optimizer_step(self, max_grad_norm=None, grad_norm=None):
        info = super().optimizer_step(max_grad_norm, grad_norm)
        info.gradient_syncs = self.counter.take()
        return info

    def state_dict(self) -> dict:
        return {"model": self.model.module.state_dict(), "optimizer": self.optimizer.state_dict()}

    def full_model_state(self) -> dict:
        return {k: t.detach().cpu().clone() for k, t in self.model.module.state_dict().items()}

    def load_state_dict(self, state: dict) -> None:
        self.model.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
