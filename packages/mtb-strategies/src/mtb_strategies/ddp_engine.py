"""The DDP engine (imports torch; loaded only when a ddp run starts)."""

import contextlib

from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from mtb.api import CountedSyncEngine, SyncCounter, cpu_copy
from mtb_strategies.expert_parallel import ExpertParallel, ExpertParallelEngine


def counting_allreduce(counter: SyncCounter, bucket):
    """DDP's default bucket all-reduce, counted."""
    counter.issued()
    return default_hooks.allreduce_hook(None, bucket)


class DDPEngine(CountedSyncEngine):
    def __init__(self, model, optimizer, context, sync_mode: str):
        super().__init__(model, optimizer, context, sync_mode, SyncCounter())
        model.register_comm_hook(self.counter, counting_allreduce)

    @classmethod
    def build(cls, model, make_optimizer, context, sync_mode: str):
        device_ids = [context.device.index] if context.device.type == "cuda" else None
        wrapped = DistributedDataParallel(model, device_ids=device_ids)
        return cls(wrapped, make_optimizer(wrapped.parameters()), context, sync_mode)

    def sync_context(self, is_last_micro_batch: bool):
        if self.sync_mode == "last" and not is_last_micro_batch:
            return self.model.no_sync()
        return contextlib.nullcontext()

    def state_dict(self) -> dict:
        return {"model": self.model.module.state_dict(), "optimizer": self.optimizer.state_dict()}

    def full_model_state(self) -> dict:
        return cpu_copy(self.model.module.state_dict())

    def load_state_dict(self, state: dict) -> None:
        self.model.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])


class ExpertParallelDDPEngine(ExpertParallelEngine, DDPEngine):
    """DDP over the dense parameters; experts sharded over the ep ranks, left out of DDP."""

    @classmethod
    def build(cls, model, make_optimizer, context, sync_mode: str):
        experts = ExpertParallel(context)
        names = experts.shard(model)
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, names)
        engine = super().build(model, make_optimizer, context, sync_mode)
        engine.expert_parallel = experts
        return engine
