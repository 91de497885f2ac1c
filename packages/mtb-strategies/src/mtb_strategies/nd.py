"""``nd``: data, tensor and sequence parallelism of one model on one DeviceMesh.

The layout (``[parallel]``) names the mesh: tensor parallelism on ``tp``
(``--sequence-parallel`` for norms and dropout on sequence shards), then
FSDP2 on ``dp_shard``, with replicas on ``dp_replicate`` (HSDP). With tp 1
it is ``fsdp`` over the data-parallel ranks. With ``pp`` above 1 the model is
cut into pipeline stages first and each stage is parallelized this way.
"""

from typing import ClassVar

from mtb_strategies.data_parallel import TorchDataParallelStrategy
from mtb_strategies.fsdp import FSDPStrategy


class NDStrategy(TorchDataParallelStrategy):
    name = "nd"
    engine = "mtb_strategies.nd_engine:NDEngine"
    default_sync_mode = "every"
    description = "N-D layout on one DeviceMesh: tensor/sequence parallel, FSDP2, HSDP"
    precisions: ClassVar[dict] = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16")}
    parallel_dims = ("dp_replicate", "cp", "tp", "pp")
    sharded_states = FSDPStrategy.sharded_states
    options = FSDPStrategy.options
