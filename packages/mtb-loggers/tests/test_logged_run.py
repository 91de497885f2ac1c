"""One 2-rank run logged to every logger, read back with each library's own reader.

What a logger holds is rank 0's view of each step: its loss and times; the
learning rate and the gradient norm are every rank's. The result document
keeps rank 0's loss and step time per measured step (``per_rank``), and the
max across ranks of every phase (``steps``), so each series is held to those.
"""

import json
import math
import os
import subprocess
import sys

import pytest
from conftest import FAILING, launch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

LOGGERS = ("tensorboard", "wandb", "mlflow")
PHASES = ("data_ms", "forward_backward_ms", "optimizer_ms")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    done = launch(tmp_path_factory.mktemp("logged"), "--log-to", ",".join([*LOGGERS, FAILING]))
    assert done.returncode == 0, done.stderr
    return done


def tensorboard_series(run) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run.logs / "tensorboard"))
    events.Reload()
    return {
        tag: {event.step: event.value for event in events.Scalars(tag)}
        for tag in events.Tags()["scalars"]
    }


def wandb_inspect(run, *flags: str) -> str:
    """wandb's own reader of the offline run's .wandb file (``wandb leet inspect``)."""
    where = str(run.logs / "wandb" / "wandb")
    command = [sys.executable, "-m", "wandb", "leet", "inspect", "--json", *flags, where]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout


def wandb_records(run) -> list[dict]:
    return [json.loads(line) for line in wandb_inspect(run).splitlines()]


def wandb_summary(run) -> dict:
    """The run's state, config and summary as its last records leave them."""
    return json.loads(wandb_inspect(run, "--summary"))


def wandb_series(run) -> dict[str, dict[int, float]]:
    series: dict[str, dict[int, float]] = {}
    for record in wandb_records(run):
        if record["type"] == "history":
            step = int(record["history"]["step"].get("num", 0))
            for key, value in record["history"]["item"].items():
                series.setdefault(key, {})[step] = value
    return series


def mlflow_client(run):
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(run.logs / "mlflow").resolve().as_uri())
    (found,) = client.search_runs([client.get_experiment_by_name("mtb").experiment_id])
    return client, found


def mlflow_series(run) -> dict[str, dict[int, float]]:
    client, found = mlflow_client(run)
    return {
        key: {m.step: m.value for m in client.get_metric_history(found.info.run_id, key)}
        for key in found.data.metrics
    }


READERS = {"tensorboard": tensorboard_series, "wandb": wandb_series, "mlflow": mlflow_series}


@pytest.fixture(scope="module", params=LOGGERS)
def series(request, run):
    return READERS[request.param](run)


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6)  # TensorBoard keeps float32


def test_every_step_is_logged_warmup_flagged(series, run):
    assert sorted(series["train/loss"]) == [0, 1, 2, 3]
    assert series["train/warmup"] == {0: 1.0, 1: 0.0, 2: 0.0, 3: 0.0}


def test_loss_and_step_time_are_rank_0s_as_the_result_records_them(series, run):
    trial = run.document["trials"][0]
    rank0 = trial["per_rank"][0]
    for i, step in enumerate(s["step"] for s in trial["steps"]):
        assert close(series["train/loss"][step], rank0["loss"][i])
        assert close(series["time/step_ms"][step], rank0["step_ms"][i])
        tokens_per_s = trial["tokens_per_step"] / (rank0["step_ms"][i] / 1000)
        assert close(series["train/tokens_per_s"][step], tokens_per_s)


def test_lr_grad_norm_and_phases_match_the_results_steps(series, run):
    for step in run.document["trials"][0]["steps"]:
        assert close(series["train/lr"][step["step"]], step["lr"])
        assert close(series["train/grad_norm"][step["step"]], step["grad_norm"])
        for phase in PHASES:  # the result keeps the slowest rank's
            assert 0 < series[f"time/{phase}"][step["step"]] <= step[phase] * (1 + 1e-6)


def test_memory_is_rank_0s_peak_so_far(series, run):
    peak = run.document["trials"][0]["per_rank"][0]["memory"]["peak_rss_bytes"]
    logged = [series["memory/peak_rss_bytes"][step] for step in range(4)]
    assert logged == sorted(logged) and 0 < logged[-1] <= peak


def test_the_results_summary_is_logged_at_the_end(run):
    expected = run.document["summary"]["tokens_per_s"]["mean"]
    assert close(wandb_summary(run)["summary"]["summary/tokens_per_s/mean"], expected)
    for reader in (tensorboard_series, mlflow_series):
        assert reader(run)["summary/tokens_per_s/mean"] == {3: pytest.approx(expected)}


def test_mlflow_holds_config_as_params_and_provenance_as_tags(run):
    _, found = mlflow_client(run)
    assert found.info.status == "FINISHED" and found.info.run_name == "r"
    assert found.data.params["training.lr"] == str(run.document["config"]["training"]["lr"])
    assert found.data.params["logging.to"] == json.dumps([*LOGGERS, FAILING])
    tags = found.data.tags
    assert tags["strategy"] == "loggers-test-allreduce" and tags["status"] == "ok"
    assert tags["config_fingerprint"] == run.document["config_fingerprint"]
    assert tags["provenance.torch"] == run.document["provenance"]["torch"]


def test_wandb_is_offline_and_holds_config_and_provenance(run):
    state = wandb_summary(run)
    assert (state["state"], state["exit_code"], state["name"]) == ("finished", 0, "r")
    config = state["config"]
    assert config["training.steps"] == 4 and config["tags.world_size"] == "2"
    assert config["provenance.python"] == run.document["provenance"]["python"]
    assert list((run.logs / "wandb" / "wandb").glob("offline-run-*/run-*.wandb"))


def test_tensorboard_holds_config_and_provenance(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run.logs / "tensorboard"))
    events.Reload()
    text = {
        tag: events.Tensors(tag)[0].tensor_proto.string_val[0].decode()
        for tag in events.Tags()["tensors"]
    }
    assert "| strategy | loggers-test-allreduce |" in text["tags/text_summary"]
    assert (
        f"| provenance.torch | {run.document['provenance']['torch']} |"
        in (text["provenance/text_summary"])
    )


def test_a_logger_failing_to_write_is_one_warning_and_the_others_go_on(run):
    warnings = [line for line in run.stderr.splitlines() if FAILING in line]
    assert warnings == [
        f"mtb: warning: metric logger {FAILING!r} failed to write, not logging to it: "
        "OSError: No space left on device"
    ]
    assert run.document["status"] == "ok"
    assert [c["name"] for c in run.document["components"]["metric_loggers"]] == [
        *LOGGERS,
        FAILING,
    ]
