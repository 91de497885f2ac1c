"""The ``nd`` engine (imports torch; loaded only when an nd run starts)."""

import contextlib

from torch.distributed.fsdp import FSDPModule

from mtb_strategies import mesh as meshes
from mtb_strategies.fsdp_engine import FSDPEngine, shard
from mtb_strategies.sync_modes import SyncCounter
from mtb_strategies.tensor_parallel import parallelize


class NDEngine(FSDPEngine):
    """Tensor parallel on the tp mesh, then FSDP2 (or HSDP) on the data-parallel mesh."""

    @classmethod
    def build(cls, model, make_optimizer, context, sync_mode: str):
        layout = context.layout
        mesh = meshes.build_mesh(context)
        tp = meshes.tp_mesh(mesh, layout)
        if tp is not None:
            parallelize(model, tp, context.config.parallel.sequence_parallel)
        dp = meshes.dp_mesh(mesh, layout)
        counter = SyncCounter()
        if dp is not None:
            shard(model, context, counter, dp)
        return cls(model, make_optimizer(model.parameters()), context, sync_mode, counter)

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
