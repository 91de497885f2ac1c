"""Checkpointed runs of the ``single`` strategy in-process: resume, async, commands, refusals."""

import pytest
from conftest import FIXED_PEAK, read_json

BASE = ["--preset", "tiny", "--warmup-steps", "1", "--dropout", "0.1", "--record-digests"]
BASE = [*BASE, *FIXED_PEAK]


def run(invoke, directory, out, *extra):
    return invoke("run", *BASE, "--checkpoint-dir", directory, "--output", out, *extra)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A continuous 6-step run, and one stopped after 3 steps then resumed to 6."""
    from click.testing import CliRunner

    from mtb.cli import make_cli
    from mtb.plugins import build_plugin_manager

    def invoke(*args):
        cli = make_cli(build_plugin_manager(load_entry_points=False))
        return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)

    root = tmp_path_factory.mktemp("ckpt")
    results = {}
    for name, extra in (
        ("continuous", ["--steps", "6", "--save-every", "3"]),
        ("first", ["--steps", "3", "--save-every", "3"]),
        ("resumed", ["--steps", "6", "--save-every", "3", "--resume", "latest"]),
        ("async", ["--steps", "6", "--save-every", "2", "--async-save"]),
    ):
        directory = root / ("split" if name in ("first", "resumed") else name)
        result = run(invoke, directory, root / f"{name}.json", *extra)
        assert result.exit_code == 0, result.output
        results[name] = read_json(root / f"{name}.json")
    return root, results


@pytest.mark.slow
def test_resumed_run_ends_bitwise_equal_to_the_continuous_one(runs):
    _, results = runs
    assert results["resumed"]["state_digests"] == results["continuous"]["state_digests"]
    resumed = results["resumed"]["checkpoint"]["resumed"]
    cfg = results["resumed"]["config"]
    tokens_per_step = cfg["data"]["micro_batch_size"] * cfg["model"]["seq_len"]
    assert (resumed["step"], resumed["exact"]) == (3, True)
    assert resumed["tokens_seen"] == 3 * tokens_per_step
    assert results["resumed"]["checkpoint"]["tokens_seen"] == 6 * tokens_per_step
    assert [s["step"] for s in results["resumed"]["trials"][0]["steps"]] == [4, 5]


@pytest.mark.slow
def test_async_saves_publish_every_checkpoint_and_record_blocked_time(runs):
    root, results = runs
    record = results["async"]["checkpoint"]
    assert [s["step"] for s in record["saves"]] == [2, 4, 6]
    assert all(s["total_s"] > 0 and s["blocked_s"] >= 0 for s in record["saves"])
    assert record["async_save"] is True and record["blocked_s_total"] > 0
    assert results["async"]["state_digests"] == results["continuous"]["state_digests"]
    assert (root / "async" / "latest").read_text().strip() == "step_00000006"


@pytest.mark.slow
def test_keep_last_prunes_after_publishing(runs):
    root, _ = runs
    assert sorted(p.name for p in (root / "async").glob("step_*")) == [
        "step_00000002",
        "step_00000004",
        "step_00000006",
    ]


@pytest.mark.slow
def test_verify_finds_equal_and_different_checkpoints(invoke, runs, tmp_path):
    root, _ = runs
    same = invoke(
        "checkpoint",
        "verify",
        root / "continuous" / "step_00000006",
        root / "split" / "step_00000006",
        "-o",
        tmp_path / "same.json",
    )
    assert same.exit_code == 0, same.output
    assert read_json(tmp_path / "same.json")["identical"] is True
    other = invoke(
        "checkpoint",
        "verify",
        root / "continuous" / "step_00000003",
        root / "continuous" / "step_00000006",
        "-o",
        tmp_path / "other.json",
    )
    assert other.exit_code == 1
    assert "differ in: model, optimizer, scheduler, train_state, rng" in other.output
    assert read_json(tmp_path / "other.json")["differing"] == [
        "model",
        "optimizer",
        "scheduler",
        "train_state",
        "rng",
    ]


@pytest.mark.slow
def test_list_inspect_and_clean(invoke, runs, tmp_path):
    import json
    import shutil

    root, _ = runs
    directory = tmp_path / "copy"
    shutil.copytree(root / "split", directory)
    (directory / "step_00000009.tmp-0a0b").mkdir()
    listing = json.loads(invoke("checkpoint", "list", directory, "--json").output)
    states = {row["name"]: (row["state"], row["latest"]) for row in listing["checkpoints"]}
    assert states["step_00000006"] == ("READY", True)
    assert states["step_00000009.tmp-0a0b"] == ("incomplete (temporary)", False)
    inspected = json.loads(invoke("checkpoint", "inspect", directory / "step_00000006").output)
    assert inspected["files_match"] and inspected["metadata"]["step"] == 6
    cleaned = invoke("checkpoint", "clean", directory)
    assert "removed 1 unusable item(s)" in cleaned.output
    assert not (directory / "step_00000009.tmp-0a0b").exists()


@pytest.mark.slow
def test_mismatched_resume_is_refused_with_the_diff(invoke, runs, tmp_path):
    root, _ = runs
    result = invoke(
        "run", *BASE, "--checkpoint-dir", root / "split", "--resume", "latest", "--steps", "9",
        "--d-model", "64", "--output", tmp_path / "x.json",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "does not match this run: model.d_model: checkpoint 32, run 64" in result.output


@pytest.mark.slow
def test_a_finished_checkpoint_has_nothing_left_to_train(invoke, runs, tmp_path):
    root, _ = runs
    result = invoke(
        "run", *BASE, "--checkpoint-dir", root / "split", "--resume", "latest", "--steps", "6",
        "--output", tmp_path / "x.json",
    )  # fmt: skip
    assert result.exit_code == 2 and "nothing left to train" in result.output


@pytest.mark.slow
def test_an_existing_step_is_never_overwritten(invoke, runs, tmp_path):
    root, _ = runs
    result = run(invoke, root / "split", tmp_path / "x.json", "--steps", "3", "--save-every", "3")
    assert result.exit_code != 0
    assert "already exists and is never overwritten" in result.output
