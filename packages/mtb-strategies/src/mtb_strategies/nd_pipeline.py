"""The nd strategy's pipeline: each stage tensor-parallel and FSDP-sharded like a whole model."""

import contextlib

from mtb_strategies import context_parallel
from mtb_strategies import mesh as meshes
from mtb_strategies.fsdp_engine import shard
from mtb_strategies.pipeline_engine import PipelineEngine
from mtb_strategies.tensor_parallel import parallelize, place_grads_like_params


class NDPipelineEngine(PipelineEngine):
    """Pipeline stages on the ``pp`` mesh dimension, tp and FSDP2 inside each stage."""

    #: whether FSDP2 shards the stages (a data-parallel dimension above 1)
    sharded = False
    #: the cp ring the stages' attention runs over (None for cp 1)
    ring = None

    @classmethod
    def build_nd(cls, model, make_optimizer, context):
        layout, parallel = context.layout, context.config.parallel
        mesh = meshes.build_mesh(context)
        tp, dp = meshes.tp_mesh(mesh, layout), meshes.dp_mesh(mesh, layout)
        ring = meshes.cp_ring(mesh, context)

        def parallelize_stage(part, counter):
            if tp is not None:
                parallelize(part, tp, parallel.sequence_parallel)
            if ring is not None:
                context_parallel.install(part, ring)
            if dp is not None:
                shard(part, context, counter, dp)

        engine = cls.build(
            model, make_optimizer, context, mesh["pp"].get_group(), parallelize_stage
        )
        engine.sharded = dp is not None
        engine.ring = ring
        engine.ring_steps = context_parallel.RingSteps(ring)
        return engine

    def forward_backward(self, batches, hooks):
        """Each micro-batch cut to this rank's cp chunks first, then the schedule."""
        if self.ring is not None:
            batches = [context_parallel.local_batch(batch, self.ring) for batch in batches]
        return super().forward_backward(batches, hooks)

    def optimizer_step(self, max_grad_norm=None, grad_norm=None):
        info = super().optimizer_step(max_grad_norm, grad_norm)
        self.ring_steps.mark()
        return info

    def rank_metrics(self, warmup_steps: int) -> dict:
        return {**super().rank_metrics(warmup_steps), **self.ring_steps.metrics(warmup_steps)}

    def autocast(self):
        """FSDP's MixedPrecisionPolicy when sharded, autocast otherwise."""
        return contextlib.nullcontext() if self.sharded else super().autocast()

    def prepare_gradients(self) -> None:
        place_grads_like_params(self.model)
