"""The nd strategy's pipeline: each stage tensor-parallel and FSDP-sharded like a whole model."""

import contextlib

from mtb_strategies import mesh as meshes
from mtb_strategies.fsdp_engine import shard
from mtb_strategies.pipeline_engine import PipelineEngine
from mtb_strategies.sync_modes import SyncCounter
from mtb_strategies.tensor_parallel import parallelize, reduce_partial_grads


class NDPipelineEngine(PipelineEngine):
    """Pipeline stages on the ``pp`` mesh dimension, tp and FSDP2 inside each stage."""

    #: whether FSDP2 shards the stages (a data-parallel dimension above 1)
    sharded = False

    @classmethod
    def build_nd(cls, model, make_optimizer, context):
        layout, parallel = context.layout, context.config.parallel
        mesh = meshes.build_mesh(context)
        tp, dp = meshes.tp_mesh(mesh, layout), meshes.dp_mesh(mesh, layout)
        counter = SyncCounter()

        def parallelize_stage(part):
            if tp is not None:
                parallelize(part, tp, parallel.sequence_parallel)
            if dp is not None:
                shard(part, context, counter, dp)

        engine = cls.build(
            model, make_optimizer, context, mesh["pp"].get_group(), parallelize_stage
        )
        engine.sharded = dp is not None
        return engine

    def autocast(self):
        """FSDP's MixedPrecisionPolicy when sharded, autocast otherwise."""
        return contextlib.nullcontext() if self.sharded else super().autocast()

    def prepare_gradients(self) -> None:
        reduce_partial_grads(self.model)
