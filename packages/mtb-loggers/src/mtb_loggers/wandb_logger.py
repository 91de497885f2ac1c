"""Weights & Biases in offline mode: a run directory under the logger's, never the network.

``wandb sync DIR/wandb/offline-run-*`` uploads it later, from a machine that may.
Its system-metrics sampler is off: it would compete with the benchmark for the CPU.
"""

import os

import attrs

from mtb_loggers.requirement import missing

PROJECT = "mtb"


class WandbSession:
    """One offline run: hyperparameters in its config, the result's numbers in its summary."""

    def __init__(self, run):
        os.environ["WANDB_MODE"] = "offline"
        import wandb

        run.directory.mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(
            console="off", silent=True, disable_git=True, x_disable_stats=True
        )
        self.run = wandb.init(
            mode="offline",
            dir=str(run.directory),
            project=PROJECT,
            name=run.name,
            config={**run.params, **{f"tags.{k}": v for k, v in run.tags.items()}},
            tags=[run.tags["strategy"], run.tags["preset"]],
            settings=settings,
        )

    def log_metrics(self, step, metrics):
        self.run.log(dict(metrics), step=step)

    def finish(self, summary, tags):
        self.run.summary.update(dict(summary))
        self.run.config.update(dict(tags), allow_val_change=True)
        self.run.finish(exit_code=0 if tags.get("status") == "ok" else 1)


@attrs.frozen
class WandbLogger:
    name: str = "wandb"
    description: str = "Weights & Biases, offline run directory (upload later: wandb sync)"

    def unavailable_reason(self) -> str | None:
        return missing("wandb", "wandb")

    def open(self, run) -> WandbSession:
        return WandbSession(run)
