"""``deepspeed``: the ZeRO engine's own save_checkpoint/load_checkpoint as a checkpoint backend.

DeepSpeed writes its partitioned model and optimizer states itself; core's
lifecycle still owns the temporary directory, RNG and train state,
metadata.json, READY and ``latest`` (DeepSpeed's own ``latest`` file is not
written: its save is not atomic by itself).
"""

from pathlib import Path

from mtb.api import CheckpointBackend, RunFailed

PAYLOAD = "deepspeed"
TAG = "state"


class DeepSpeedBackend(CheckpointBackend):
    name = "deepspeed"
    description = "DeepSpeed's own save/load of ZeRO partitions (zero1-3)"
    reshard_refusal = (
        "DeepSpeed ZeRO partitions the optimizer state per rank; a zero checkpoint loads "
        "only at the world size it was saved at"
    )

    def supports(self, strategy) -> bool:
        return getattr(strategy, "checkpoint_backend", "dcp") == self.name

    def save(self, engine, directory: Path, context, asynchronous=False, group=None):
        """Synchronous always: DeepSpeed's save blocks until its files are written."""
        engine.model.save_checkpoint(str(directory / PAYLOAD), tag=TAG, save_latest=False)
        return None

    def load(self, engine, directory: Path, context) -> None:
        path, _ = engine.model.load_checkpoint(
            str(directory / PAYLOAD),
            tag=TAG,
            load_optimizer_states=True,
            load_lr_scheduler_states=False,
            load_module_strict=True,
        )
        if path is None:
            raise RunFailed(f"{directory}: DeepSpeed found no checkpoint under {PAYLOAD}/{TAG}")

    def optimizer_state(self, engine) -> dict:
        return engine.optimizer.state_dict()
