"""``nd``: data, tensor and sequence parallelism of one model on one DeviceMesh.

The layout (``[parallel]``) names the mesh: tensor parallelism on ``tp``
(``--sequence-parallel`` for norms and dropout on sequence shards), then
FSDP2 on ``dp_shard``, with replicas on ``dp_replicate`` (HSDP). With tp 1
it is ``fsdp`` over the data-parallel ranks. With ``pp`` above 1 the model is
cut into pipeline stages first and each stage is parallelized this way.
``--ep`` shards the experts of an MoE model over a sub-group of the
data-parallel ranks (FSDP or HSDP on the dense parameters), as ``fsdp --ep``
does; it does not compose with tp, cp or pp yet, and says so before launch.
"""

from typing import ClassVar

from mtb.api import ConfigError
from mtb_strategies.data_parallel import TorchDataParallelStrategy
from mtb_strategies.fsdp import FSDPStrategy

#: the dimensions expert parallelism cannot share a layout with (yet)
NOT_WITH_EP = ("cp", "tp", "pp")


class NDStrategy(TorchDataParallelStrategy):
    name = "nd"
    engine = "mtb_strategies.nd_engine:NDEngine"
    expert_parallel_engine = "mtb_strategies.nd_engine:ExpertParallelNDEngine"
    default_sync_mode = "every"
    description = "N-D layout on one DeviceMesh: tensor/sequence parallel, FSDP2, HSDP"
    precisions: ClassVar[dict] = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16")}
    parallel_dims = ("dp_replicate", "cp", "tp", "pp", "ep")
    sharded_states = FSDPStrategy.sharded_states
    options = FSDPStrategy.options

    def check_layout(self, layout) -> None:
        super().check_layout(layout)
        beside = [f"{d} {getattr(layout, d)}" for d in NOT_WITH_EP if getattr(layout, d) > 1]
        if layout.ep > 1 and beside:
            raise ConfigError(
                "parallel.ep",
                f"{layout.ep} runs over data-parallel ranks only; strategy 'nd' does not "
                f"combine it with {', '.join(beside)} (use tp = cp = pp = 1 with ep)",
            )
