"""``zero1``/``zero2``/``zero3``: DeepSpeed ZeRO stages from a generated config.

The config is generated from the run (stage, micro-batch, accumulation,
precision, clipping, AdamW); ``--deepspeed-config FILE`` merges a user's
JSON over it, and the merged config is validated by DeepSpeed and stored in
the result. DeepSpeed owns accumulation, so the sync mode is its own.
"""

from typing import ClassVar

from mtb.api import Strategy, StrategyOption, UsageError
from mtb_strategies.extension_locks import check_no_stale_lock
from mtb_strategies.sync_modes import resolve_sync_mode

#: the states a rank holds 1/N of once a step's backward is done. Stage 1 shards only the
#: optimizer state in the ZeRO paper, but DeepSpeed's stage 1 reduces each gradient into the
#: rank's partition at the accumulation boundary and frees it: measured on small (2 ranks, fp32),
#: zero1 and zero2 held the same 278,888,452 bytes, and peaked at 858.7 and 860.1 MB
SHARDED_BY_STAGE = {
    1: ("gradients", "optimizer_state"),
    2: ("gradients", "optimizer_state"),
    3: ("parameters", "gradients", "optimizer_state"),
}


class ZeroStrategy(Strategy):
    description_by_stage: ClassVar[dict] = {
        1: "DeepSpeed ZeRO-1 (optimizer state sharded)",
        2: "DeepSpeed ZeRO-2 (gradients and optimizer state sharded)",
        3: "DeepSpeed ZeRO-3 (parameters, gradients and optimizer state sharded)",
    }
    requires = ("deepspeed",)
    #: DeepSpeed saves and loads its own partitions (see deepspeed_checkpoint.py)
    checkpoint_backend = "deepspeed"
    install_hint = "pip install mtb-strategies[deepspeed]"
    compiles = False  # DeepSpeed partitions and hooks the modules itself; untested compiled
    options = (
        StrategyOption(
            "deepspeed_config",
            str,
            None,
            "zero*: JSON file whose keys are merged over the generated DeepSpeed config",
        ),
    )

    def __init__(self, stage: int):
        self.stage = stage
        self.name = f"zero{stage}"
        self.description = self.description_by_stage[stage]
        self.sharded_states = SHARDED_BY_STAGE[stage]

    def state_bytes_per_parameter(self, training) -> dict[str, int]:
        """DeepSpeed keeps fp32 master weights beside 16-bit parameters and gradients."""
        if training.precision == "fp32":
            return {"parameters": 4, "gradients": 4, "optimizer_state": 12}
        return {"parameters": 2, "gradients": 2, "optimizer_state": 12}

    def check(self, config, device_type: str) -> None:
        super().check(config, device_type)
        resolve_sync_mode(
            config.training.gradient_sync_mode, "deepspeed", ("deepspeed",), self.name
        )
        if config.training.optimizer != "adamw":
            raise UsageError(f"training.optimizer: strategy {self.name!r} supports adamw only")
        check_no_stale_lock()  # DeepSpeed would wait on it, silently, until the launch timeout

    def setup(self, model, make_optimizer, context):
        from mtb_strategies.zero_engine import ZeroEngine

        return ZeroEngine.build(model, context, self.stage)
