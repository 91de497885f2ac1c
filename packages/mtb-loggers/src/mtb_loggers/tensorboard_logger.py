"""TensorBoard: event files written by torch's SummaryWriter into the logger's directory."""

from collections.abc import Mapping

import attrs

from mtb_loggers.requirement import missing


def markdown_table(values: Mapping[str, object]) -> str:
    """``values`` as a two-column markdown table: TensorBoard's text tab renders it."""
    rows = "\n".join(f"| {key} | {value} |" for key, value in values.items())
    return f"| key | value |\n|---|---|\n{rows}"


class TensorBoardSession:
    """One run's event file; hyperparameters go to the HParams tab, tags to the text tab."""

    def __init__(self, run):
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        self.writer = SummaryWriter(log_dir=str(run.directory))
        self.last_step = 0
        for summary in hparams(_hparam_values(run.params), {"train/loss": 0.0}):
            self.writer.file_writer.add_summary(summary)
        self.writer.add_text("tags", markdown_table(run.tags))

    def log_metrics(self, step, metrics):
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, step)
        self.last_step = step

    def finish(self, summary, tags):
        for name, value in summary.items():
            self.writer.add_scalar(name, value, self.last_step)
        self.writer.add_text("provenance", markdown_table(tags), self.last_step)
        self.writer.close()


def _hparam_values(params: Mapping[str, object]) -> dict:
    """HParams takes numbers, text and booleans: a missing value is shown as "none"."""
    return {key: "none" if value is None else value for key, value in params.items()}


@attrs.frozen
class TensorBoardLogger:
    name: str = "tensorboard"
    description: str = "TensorBoard event files (view: tensorboard --logdir DIR)"

    def unavailable_reason(self) -> str | None:
        return missing("tensorboard", "tensorboard")

    def open(self, run) -> TensorBoardSession:
        return TensorBoardSession(run)
