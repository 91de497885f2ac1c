"""``fsdp``: FSDP2 ``fully_shard`` on each transformer block and on the root.

Parameters, gradients and optimizer state are sharded across ranks. Under
accumulation ``auto`` means ``every`` (reduce-scatter per micro-batch, which
keeps gradients sharded); ``last`` defers it to the final micro-batch at the
cost of unsharded gradient memory.
"""

from typing import ClassVar

from mtb.strategy import Strategy, StrategyOption
from mtb_strategies.sync_modes import resolve_sync_mode


class FSDPStrategy(Strategy):
    name = "fsdp"
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

    def resolve_sync(self, requested: str) -> str:
        return resolve_sync_mode(requested, "every", ("every", "last"), self.name)

    def check(self, config, device_type: str) -> None:
        super().check(config, device_type)
        self.resolve_sync(config.training.gradient_sync_mode)

    def setup(self, model, make_optimizer, context):
        from mtb_strategies.fsdp_engine import FSDPEngine

        mode = self.resolve_sync(context.config.training.gradient_sync_mode)
        return FSDPEngine.build(model, make_optimizer, context, mode)
