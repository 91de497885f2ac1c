"""The ``nd`` engine (imports torch; loaded only when an nd run starts)."""

import contextlib

from torch.distributed.fsdp import FSDPModule

from mtb.api import SyncCounter
from mtb_strategies import context_parallel
from mtb_strategies import mesh as meshes
from mtb_strategies.expert_parallel import ExpertParallel, ExpertParallelEngine
from mtb_strategies.fsdp_engine import FSDPEngine, shard
from mtb_strategies.tensor_parallel import parallelize, place_grads_like_params
from mtb_strategies.tp_collectives import CollectiveCounter


class NDEngine(FSDPEngine):
    """Tensor parallel on the tp mesh, then FSDP2 (or HSDP) on the data-parallel mesh.

    The tensor-parallel collectives of each trial's first step are counted as
    torch dispatches them (a dispatch mode costs time on every op, so only
    there) and reported per step in the result's strategy details.
    """

    def __init__(self, model, optimizer, context, sync_mode, counter, tp_group=None, ring=None):
        super().__init__(model, optimizer, context, sync_mode, counter)
        self.tp_counter = None if tp_group is None else CollectiveCounter(tp_group.group_name)
        self.tp_counts: dict | None = None
        self.ring = ring
        self.ring_steps = context_parallel.RingSteps(ring)

    @classmethod
    def build(cls, model, make_optimizer, context, sync_mode: str):
        layout = context.layout
        if layout.pp > 1:
            from mtb_strategies.nd_pipeline import NDPipelineEngine

            return NDPipelineEngine.build_nd(model, make_optimizer, context)
        mesh = meshes.build_mesh(context)
        tp = meshes.tp_mesh(mesh, layout)
        if tp is not None:
            parallelize(model, tp, context.config.parallel.sequence_parallel)
        ring = meshes.cp_ring(mesh, context)
        if ring is not None:
            context_parallel.install(model, ring)
        dp = meshes.dp_mesh(mesh, layout)
        counter = SyncCounter()
        if dp is not None:
            shard(model, context, counter, dp)
        optimizer = make_optimizer(model.parameters())
        group = None if tp is None else tp.get_group()
        return cls(model, optimizer, context, sync_mode, counter, group, ring)

    @property
    def sharded(self) -> bool:
        """Whether FSDP2 wraps the model (a data-parallel dimension above 1)."""
        return isinstance(self.model, FSDPModule)

    def autocast(self):
        """FSDP's MixedPrecisionPolicy when sharded, autocast otherwise."""
        if self.sharded:
            return contextlib.nullcontext()
        return super(FSDPEngine, self).autocast()

    def sync_context(self, is_last_micro_batch: bool):
        if self.sharded:
            return super().sync_context(is_last_micro_batch)
        return contextlib.nullcontext()

    def counting(self):
        """The tp collective counter until the first step has been counted."""
        if self.tp_counter is None or self.tp_counts is not None:
            return contextlib.nullcontext()
        return self.tp_counter

    def forward(self, batch):
        if self.ring is not None:
            batch = context_parallel.local_batch(batch, self.ring)
        with self.counting():
            return super().forward(batch)

    def backward(self, loss) -> None:
        with self.counting():
            super().backward(loss)

    def forward_backward(self, batches, hooks):
        """The step's micro-batches, then each gradient placed as its parameter (tp)."""
        loss = super().forward_backward(batches, hooks)
        with self.counting():
            place_grads_like_params(self.model)
        return loss

    def optimizer_step(self, max_grad_norm=None, grad_norm=None):
        info = super().optimizer_step(max_grad_norm, grad_norm)
        if self.tp_counter is not None and self.tp_counts is None:
            self.tp_counts = dict(sorted(self.tp_counter.counts.items()))
        self.ring_steps.mark()
        return info

    def rank_metrics(self, warmup_steps: int) -> dict:
        return {**super().rank_metrics(warmup_steps), **self.ring_steps.metrics(warmup_steps)}

    def details(self) -> dict:
        details = super().details()
        if self.tp_counts is not None:
            details["tp_collectives_per_step"] = self.tp_counts
        return details


class ExpertParallelNDEngine(ExpertParallelEngine, NDEngine):
    """FSDP2 or HSDP on the data-parallel mesh over the dense parameters; the experts of
    every MoE layer sharded over ep ranks of the data-parallel ones, left out of FSDP."""

    @classmethod
    def build(cls, model, make_optimizer, context, sync_mode: str):
        experts = ExpertParallel(context)
        experts.shard(model)
        dp = meshes.dp_mesh(meshes.build_mesh(context), context.layout)
        counter = SyncCounter()
        shard(model, context, counter, dp, experts.params)
        engine = cls(model, make_optimizer(model.parameters()), context, sync_mode, counter)
        engine.expert_parallel = experts
        return engine
