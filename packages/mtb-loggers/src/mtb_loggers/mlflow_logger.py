"""MLflow with a local file store: a ``file:`` tracking URI at the logger's directory.

MLflow 3 keeps its file store in maintenance mode and refuses it unless
MLFLOW_ALLOW_FILE_STORE is true; a local store needs no server and no database.
"""

import os
import time

import attrs

from mtb_loggers.requirement import missing

EXPERIMENT = "mtb"
#: MLflow's limit on the parameters or tags of one log_batch call
BATCH = 100


def _batches(items: list) -> list[list]:
    return [items[i : i + BATCH] for i in range(0, len(items), BATCH)]


class MLflowSession:
    """One MLflow run: config as parameters, start and end tags, every step as metrics."""

    def __init__(self, run):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=run.directory.resolve().as_uri())
        experiment = self.client.get_experiment_by_name(EXPERIMENT)
        experiment_id = (
            experiment.experiment_id if experiment else self.client.create_experiment(EXPERIMENT)
        )
        self.run_id = self.client.create_run(
            experiment_id, run_name=run.name, tags=dict(run.tags)
        ).info.run_id
        params = [Param(key, str(value)) for key, value in run.params.items()]
        for batch in _batches(params):
            self.client.log_batch(self.run_id, params=batch)
        self.last_step = 0

    def log_metrics(self, step, metrics):
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(name, value, now, step) for name, value in metrics.items()]
        self.client.log_batch(self.run_id, metrics=batch)
        self.last_step = step

    def finish(self, summary, tags):
        from mlflow.entities import RunTag

        self.log_metrics(self.last_step, summary)
        for batch in _batches([RunTag(key, value) for key, value in tags.items()]):
            self.client.log_batch(self.run_id, tags=batch)
        status = "FINISHED" if tags.get("status") == "ok" else "FAILED"
        self.client.set_terminated(self.run_id, status)


@attrs.frozen
class MLflowLogger:
    name: str = "mlflow"
    description: str = "MLflow, local file store (view: mlflow ui --backend-store-uri DIR)"

    def unavailable_reason(self) -> str | None:
        return missing("mlflow", "mlflow")

    def open(self, run) -> MLflowSession:
        return MLflowSession(run)
