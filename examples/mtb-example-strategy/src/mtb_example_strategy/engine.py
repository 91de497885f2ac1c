"""The Local SGD engine; imported lazily by the strategy because it imports torch."""

import torch
import torch.distributed as dist

from mtb.api import CountedSyncEngine, StepInfo, SyncCounter


def _process_group_world() -> int:
    """World size of the default process group; 1 when there is none."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def _buckets(params):
    """Parameters grouped by (device, dtype), so each group flattens into one buffer."""
    groups: dict[tuple, list[torch.Tensor]] = {}
    for param in params:
        groups.setdefault((param.device, param.dtype), []).append(param)
    return groups.values()


def _each_bucket_flat(model: torch.nn.Module, collective) -> None:
    """Run ``collective`` in place on each bucket flattened, then copy the result back."""
    for bucket in _buckets(model.parameters()):
        flat = torch.cat([p.detach().reshape(-1) for p in bucket])
        collective(flat)
        offset = 0
        for param in bucket:
            count = param.numel()
            param.copy_(flat[offset : offset + count].view_as(param))
            offset += count


@torch.no_grad()
def average_parameters(model: torch.nn.Module) -> bool:
    """Replace every parameter by its mean over the ranks; False when there is one rank.

    One all-reduce per (device, dtype) bucket. gloo has no AVG reduction, so
    the sum is divided by the world size.
    """
    world = _process_group_world()
    if world == 1:
        return False

    def mean(flat: torch.Tensor) -> None:
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat.div_(world)

    _each_bucket_flat(model, mean)
    return True


@torch.no_grad()
def broadcast_parameters(model: torch.nn.Module, src: int = 0) -> None:
    """Copy rank ``src``'s parameters to every rank (no-op without a process group)."""
    if _process_group_world() > 1:
        _each_bucket_flat(model, lambda flat: dist.broadcast(flat, src=src))


class LocalSGDEngine(CountedSyncEngine):
    """The plain engine (no gradient sync), plus a parameter average every ``sync_every`` steps.

    On one process without a process group this is exactly plain training.
    Gradients are never synchronised, so the gradient norm the trainer records
    (the plain engine's, every step) is each rank's own, not a global one.
    The averages are counted with mtb.api's SyncCounter: a step's
    ``gradient_syncs`` is 1 when it averaged the replicas, else 0.
    """

    def __init__(self, model, optimizer, context, sync_every: int = 2):
        if sync_every < 1:
            raise ValueError(f"sync_every must be at least 1, got {sync_every}")
        super().__init__(model, optimizer, context, f"every {sync_every} steps", SyncCounter())
        self.sync_every = sync_every
        self.local_steps = 0
        self.syncs = 0

    def optimizer_step(self, *args, **kwargs) -> StepInfo:
        """The local step (clipping, scaler) as the plain engine does it, then maybe a sync."""
        info = super().optimizer_step(*args, **kwargs)  # counts what backward issued: nothing
        self.local_steps += 1
        if self.local_steps % self.sync_every == 0:
            with self.counter.bracket():
                if average_parameters(self.model):
                    self.counter.issued()
                    self.syncs += 1
            info.gradient_syncs = self.counter.take()
        return info
