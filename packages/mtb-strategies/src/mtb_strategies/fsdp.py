"""``fsdp``: FSDP2 ``fully_shard`` on each transformer block and on the root.

Parameters, gradients and optimizer state are sharded across ranks. Under
accumulation ``auto`` means ``every`` (reduce-scatter per micro-batch, which
keeps gradients sharded); ``last`` defers it to the final micro-batch at the
cost of unsharded gradient memory.
"""

from typing import ClassVar

from mtb.api import StrategyOption
from mtb_strategies.data_parallel import TorchDataParallelStrategy


class FSDPStrategy(TorchDataParallelStrategy):
    name = "fsdp"
    engine = "mtb_strategies.fsdp_engine:FSDPEngine"
    expert_parallel_engine = "mtb_strategies.fsdp_engine:ExpertParallelFSDPEngine"
    default_sync_mode = "every"
    description = "FSDP2 fully_shard per block and root (sharded params, grads, optimizer)"
    precisions: ClassVar[dict] = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16")}
    sharded_states = ("parameters", "gradients", "optimizer_state")
    options = (
        StrategyOption(
            "fsdp_reshard_after_forward",
            bool,
            True,
            "fsdp: free gathered parameters after forward (re-gather in backward)",
        ),
    )
